package jsonw

import (
	"bytes"
	"encoding/json"
	"math"
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
