package engine

import (
	"testing"

	"github.com/batchd/batchd/actors"
)

func TestRoleOf(t *testing.T) {
	acc, _ := actors.SplitAccumulatorID(splitBase, []string{"a", "b"}, "b")
	for _, c := range []struct {
		id   uint64
		want string
	}{
		{batcherID, "batcher"},
		{waiterID, "actor"},
		{frontID0, "front"},
		{deviceID0 - 1, "front"},
		{deviceID0, "device"},
		{deviceID0 + 7, "device"},
		{acc, "accumulator"},
	} {
		if got := roleOf(actors.Address{Node: "n", ID: c.id}); got != c.want {
			t.Errorf("roleOf(ID %d) = %q, want %q", c.id, got, c.want)
		}
	}
}
