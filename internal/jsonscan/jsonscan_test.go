package jsonscan

import "testing"

func TestString(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string
		ok   bool
	}{
		{` "abc"`, "abc", true},
		{`""`, "", true},
		{`"zoë 日本"`, "zoë 日本", true},
		{`"a\"b"`, "", false},
		{`"a\u0041"`, "", false},
		{"\"tab\there\"", "", false},
		{"\"bad \xff\"", "", false},
		{`"unterminated`, "", false},
		{`abc`, "", false},
	} {
		s := New([]byte(c.in))
		got, ok := s.String()
		if ok != c.ok || string(got) != c.want {
			t.Errorf("String(%q) = %q %v, want %q %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestInteger(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"-0", 0, true}, {" 42", 42, true}, {"-17,", -17, true},
		{"9223372036854775807", 9223372036854775807, true},
		{"9223372036854775808", 0, false}, {"01", 0, false}, {"-", 0, false}, {"1.5", 0, false},
		{"1e3", 0, false}, {"1E3", 0, false}, {"+1", 0, false}, {"", 0, false}, {"x", 0, false},
	} {
		s := New([]byte(c.in))
		got, text, ok := s.Integer()
		if ok != c.ok || got != c.want {
			t.Errorf("Integer(%q) = %d %q %v, want %d %v", c.in, got, text, ok, c.want, c.ok)
		}
	}
}

func TestObjectBoolEnd(t *testing.T) {
	s := New([]byte(` { "a" : true , "b" : false , "c": "x" } `))
	var a, b bool
	var c string
	ok := s.Object(func(key []byte) bool {
		switch string(key) {
		case "a":
			v, ok := s.Bool()
			a = v
			return ok
		case "b":
			v, ok := s.Bool()
			b = v
			return ok
		case "c":
			v, ok := s.String()
			c = string(v)
			return ok
		}
		return false
	})
	if !ok || !s.End() || !a || b || c != "x" {
		t.Fatalf("Object: ok=%v end=%v a=%v b=%v c=%q", ok, s.End(), a, b, c)
	}
	for _, in := range []string{`{"a":tru}`, `{"a":true,}`, `{"a":true`, `{"a" true}`, `[]`, `{"z":1}`} {
		s := New([]byte(in))
		if s.Object(func(key []byte) bool { _, ok := s.Bool(); return ok && string(key) == "a" }) {
			t.Errorf("Object(%q) accepted", in)
		}
	}
	s = New([]byte(`{} x`))
	if !s.Object(func([]byte) bool { return false }) || s.End() {
		t.Fatal("trailing data not seen")
	}
}
