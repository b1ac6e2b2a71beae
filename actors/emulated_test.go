package actors

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestEmulatedOutputMatches holds EmulatedOutputMatches to EmulatedOutput
// on random inputs and near misses.
func TestEmulatedOutputMatches(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 2000; i++ {
		in := make([]byte, r.IntN(40))
		for j := range in {
			in[j] = byte(r.IntN(256))
		}
		model, version, input := fmt.Sprintf("m%d", r.IntN(3)), fmt.Sprintf("v%d", r.IntN(3)), string(in)
		out := EmulatedOutput(model, version, input)
		if !EmulatedOutputMatches(out, model, version, InputHash(input)) {
			t.Fatalf("EmulatedOutputMatches(%q, %q, %q, %q) = false for EmulatedOutput's own output", out, model, version, input)
		}
		for _, bad := range []struct{ out, model, version, input string }{
			{out, model, version, input + "x"},
			{out, model + "x", version, input},
			{out, model, version + "x", input},
			{out, "", "", input},
			{out + "0", model, version, input},
			{out[:len(out)-1], model, version, input},
			{"", model, version, input},
			{EmulatedOutput(version, model, input), model, version, input},
		} {
			want := bad.out == EmulatedOutput(bad.model, bad.version, bad.input)
			if got := EmulatedOutputMatches(bad.out, bad.model, bad.version, InputHash(bad.input)); got != want {
				t.Fatalf("EmulatedOutputMatches(%q, %q, %q, %q) = %v, EmulatedOutput says %v", bad.out, bad.model, bad.version, bad.input, got, want)
			}
		}
	}
}
