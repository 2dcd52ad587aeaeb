package jsonw

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"testing"
)

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "a\"b\\c", "\b\f\n\r\t\x00\x1f", "<a href='x'>&</a>", "\u2028\u2029", "\xff\xfe", "é 日本", "\xe2\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendString([]byte("x"), s); !bytes.Equal(got[1:], want) || got[0] != 'x' {
			t.Fatalf("AppendString(%q) = %s, encoding/json %s", s, got[1:], want)
		}
	})
}

func FuzzAppendFloat(f *testing.F) {
	for _, v := range []float64{0, 1, -1, 0.5, 1e-6, 9.99e-7, 1e21, 1e20, 123456789.125, math.SmallestNonzeroFloat64, math.MaxFloat64, math.Copysign(0, -1), 1e-9} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v float64) {
		want, err := json.Marshal(v)
		got, ok := AppendFloat(nil, v)
		if (err == nil) != ok {
			t.Fatalf("AppendFloat(%v) ok=%v, encoding/json err=%v", v, ok, err)
		}
		if ok && !bytes.Equal(got, want) {
			t.Fatalf("AppendFloat(%v) = %s, encoding/json %s", v, got, want)
		}
	})
}

func BenchmarkAppendString(b *testing.B) {
	buf := make([]byte, 0, 64)
	for i := 0; i < b.N; i++ {
		buf = AppendString(buf[:0], "POST /v1/auth/login")
	}
}

// FuzzAppendMember: an object built member by member reads back as the
// members given, in order, and is what encoding/json writes for them.
func FuzzAppendMember(f *testing.F) {
	f.Add("retry_after_ms", int64(1000), "rule", "login <a>")
	f.Add("", int64(-1), "\xff", "\u2028")
	f.Fuzz(func(t *testing.T, n1 string, v1 int64, n2, v2 string) {
		k1, _ := json.Marshal(n1)
		k2, _ := json.Marshal(n2)
		if string(k1) == string(k2) {
			return // one name twice: not an object's shape
		}
		b := append([]byte(nil), '{')
		b = AppendInt(AppendMember(b, n1), v1)
		b = AppendString(AppendMember(b, n2), v2)
		b = append(b, '}')
		s2, _ := json.Marshal(v2)
		want := "{" + string(k1) + ":" + strconv.FormatInt(v1, 10) + "," + string(k2) + ":" + string(s2) + "}"
		if string(b) != want {
			t.Fatalf("object %s, want %s", b, want)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil || len(m) != 2 {
			t.Fatalf("object %s: %v %v", b, m, err)
		}
	})
}

// TestAppendMemberBody: without braces the first member has no comma,
// as the error envelope's details body needs.
func TestAppendMemberBody(t *testing.T) {
	b := AppendInt(AppendMember(nil, "retry_after_ms"), 1000)
	b = AppendString(AppendMember(b, "scope"), "account")
	if want := `"retry_after_ms":1000,"scope":"account"`; string(b) != want {
		t.Fatalf("body %s, want %s", b, want)
	}
}
