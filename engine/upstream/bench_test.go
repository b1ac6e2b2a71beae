package upstream

import (
	"context"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkOIPBatch is the hop's own cost: one batch of n 16-byte inputs
// through Slot.Run to an in-process OIP stand-in that answers at once
// (both sides' encoding and decoding, loopback HTTP on a kept-alive
// connection), per batch.
func BenchmarkOIPBatch(b *testing.B) {
	for _, binary := range []bool{true, false} {
		for _, n := range []int{1, 20, 100} {
			b.Run("binary="+strconv.FormatBool(binary)+"/n="+strconv.Itoa(n), func(b *testing.B) {
				s := newOIPStandIn(b, nil)
				defer s.Close()
				c := DefaultOIPConfig()
				c.URL = s.URL
				c.BinaryData = binary
				u, err := NewOIP(c)
				if err != nil {
					b.Fatal(err)
				}
				defer u.Close()
				slot := u.Slot(0)
				inputs := make([]string, n)
				for i := range inputs {
					inputs[i] = strings.Repeat(strconv.Itoa(i%10), 16)
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, _, err := slot.Run(context.Background(), "m", "v1", inputs); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
