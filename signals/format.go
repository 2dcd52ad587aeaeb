package signals

import (
	"strconv"
	"strings"
	"time"
)

// alertID returns the deterministic episode id of an alert:
// "<kind>:<rule>:<subject>:<id>:<unix-ms of ts>".
func alertID(kind, rule, subject, id string, ts time.Time) string {
	var b strings.Builder
	b.Grow(len(kind) + len(rule) + len(subject) + len(id) + 24)
	b.WriteString(kind)
	b.WriteByte(':')
	b.WriteString(rule)
	b.WriteByte(':')
	b.WriteString(subject)
	b.WriteByte(':')
	b.WriteString(id)
	b.WriteByte(':')
	b.WriteString(strconv.FormatInt(ts.UnixMilli(), 10))
	return b.String()
}

// fmtDuration writes d the way policy files do: "15m", "1h30m", "10s".
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// fmtFloat writes f with up to 4 significant digits ("0.05", "1.667"),
// or as a whole number from 1000 on ("12345").
func fmtFloat(f float64) string {
	if f >= 1000 || f <= -1000 {
		return strconv.FormatFloat(f, 'f', 0, 64)
	}
	return strconv.FormatFloat(f, 'g', 4, 64)
}

// ordinal returns "2nd", "3rd", "11th"...
func ordinal(n int) string {
	suffix := "th"
	switch n % 100 {
	case 11, 12, 13:
	default:
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return strconv.Itoa(n) + suffix
}
