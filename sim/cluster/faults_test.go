package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/sim/swim"
)

func TestParseFaults(t *testing.T) {
	got, err := ParseFaults("crash:n001@10s, restart:n001@30s,partition:n000|n001+n002@5s-13s,oneway:n000|n002@1s-2s")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[0].Kind != swim.Crash || got[0].At != 10*time.Second || got[1].Kind != swim.Restart ||
		got[2].Kind != swim.Partition || got[2].OneWay || len(got[2].B) != 2 || got[2].Until != 13*time.Second || !got[3].OneWay {
		t.Fatalf("parsed %+v", got)
	}
	for _, bad := range []string{"crash:n001", "crash@10s", "boom:n001@1s", "crash:n001@-1s", "partition:n000@1s-2s", "partition:a|b@2s-1s"} {
		if _, err := ParseFaults(bad); err == nil || !strings.Contains(err.Error(), "faults:") {
			t.Errorf("%q: err %v, want a faults error", bad, err)
		}
	}
	if ev, err := ParseFaults(" "); err != nil || ev != nil {
		t.Fatalf("empty: %v %v", ev, err)
	}
}
