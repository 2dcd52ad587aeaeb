package visible

import "testing"

func TestFormat(t *testing.T) {
	for in, want := range map[string]string{
		"alice@example.com":       "alice@example.com",
		"ceo\u202emoc.elpmaxe@":   "ceo[U+202E]moc.elpmaxe@",
		"a\u200bb\u2066c\u2069":   "a[U+200B]b[U+2066]c[U+2069]",
		"\ufeffbom":               "[U+FEFF]bom",
		"名前 émoji 🙂":              "名前 émoji 🙂",
		"soft\u00adhyphen":        "soft[U+00AD]hyphen",
		"tag\U000E0041\U000E007F": "tag[U+E0041][U+E007F]",
		"alice-phone\u00a0":       "alice-phone[U+00A0]",
		"en\u2002space\u3000":     "en[U+2002]space[U+3000]",
		"line\u2028para\u2029":    "line[U+2028]para[U+2029]",
		"plain spaces stay":       "plain spaces stay",
	} {
		if got := Format(in); got != want {
			t.Errorf("Format(%q) = %q, want %q", in, got, want)
		}
	}
}
