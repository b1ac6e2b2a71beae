package httpapi

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// utf8Reader passes valid UTF-8 through however reads cut its runes, and
// fails on invalid bytes, a rune cut short at the end included.
func TestUTF8Reader(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"plain ascii", true},
		{"h\u00e9llo \u4e16\u754c \U0001F600!", true},
		{"bad \xff byte", false},
		{"cut at the end \xe4\xb8", false},
		{"lone continuation \x80", false},
		{"surrogate \xed\xa0\x80", false},
	} {
		for name, rd := range map[string]io.Reader{
			"whole":    strings.NewReader(c.in),
			"one byte": iotest.OneByteReader(strings.NewReader(c.in)),
			"halves":   iotest.HalfReader(strings.NewReader(c.in)),
		} {
			got, err := io.ReadAll(&utf8Reader{r: rd})
			if c.ok && (err != nil || string(got) != c.in) {
				t.Errorf("%q, %s: %q %v", c.in, name, got, err)
			}
			if !c.ok && !errors.Is(err, errBodyUTF8) {
				t.Errorf("%q, %s: %v, want errBodyUTF8", c.in, name, err)
			}
		}
	}
}
