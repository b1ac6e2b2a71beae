package cudabridge

import (
	"fmt"
	"testing"
)

// outputsForString are outputs whose continuations cover every printable
// byte, quotes and backslashes among them, at every position, then four
// with a byte that is not printable.
func outputsForString() []Output {
	var outs []Output
	for c := PrintLo - 2; c <= PrintHi+2; c++ {
		var o Output
		o.Label = int(c) % Labels
		for i := range o.Cont {
			o.Cont[i] = byte(PrintLo + (int(c)-PrintLo+i*7)%(PrintHi-PrintLo+1))
		}
		if c < PrintLo || c > PrintHi {
			o.Cont[3] = byte(c) // not printable: \x1e, \x1f, \x7f, \x80
		}
		outs = append(outs, o)
	}
	return outs
}

func TestOutputStringIsSprintf(t *testing.T) {
	for _, o := range outputsForString() {
		want := fmt.Sprintf("label=%s next=%q", LabelNames[o.Label], string(o.Cont[:]))
		if got := o.String(); got != want {
			t.Fatalf("String() = %s, want %s", got, want)
		}
	}
}

// BenchmarkOutputString formats a batch of 100 outputs, as serveBatch does
// after each batch; sprintf is the fmt form it replaced.
func BenchmarkOutputString(b *testing.B) {
	outs := outputsForString()[2:][:BatchMax]
	b.Run("string", func(b *testing.B) {
		for b.Loop() {
			for _, o := range outs {
				_ = o.String()
			}
		}
	})
	b.Run("sprintf", func(b *testing.B) {
		for b.Loop() {
			for _, o := range outs {
				_ = fmt.Sprintf("label=%s next=%q", LabelNames[o.Label], string(o.Cont[:]))
			}
		}
	})
}
