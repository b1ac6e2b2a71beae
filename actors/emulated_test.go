package actors

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
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

func TestParseLatencyTable(t *testing.T) {
	m, err := ParseLatencyTable([]byte("# size,latency\n1,100ms\n\n50, 120\n100,150ms\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		n    int
		want time.Duration
	}{{1, 100 * time.Millisecond}, {50, 120 * time.Millisecond}, {75, 135 * time.Millisecond}, {200, 150 * time.Millisecond}} {
		if got := m.Predict(c.n, 0); got != c.want {
			t.Errorf("Predict(%d) = %v, want %v", c.n, got, c.want)
		}
	}
	for _, bad := range []string{"", "1", "x,100ms", "1,fast", "2,100ms\n1,90ms", "0,1ms"} {
		if _, err := ParseLatencyTable([]byte(bad)); err == nil {
			t.Errorf("ParseLatencyTable(%q) accepted", bad)
		}
	}
}
