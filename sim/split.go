package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/batchd/batchd/actors"
)

// split is a Run's accumulators when Config.Split is set: the router at
// BatcherAddr, one Batcher per model, and the self-check of their books.
// As an Observer it runs each accumulator's Check on the state its last
// delivery left, before the next one (the ledger does so for a single
// batcher); check hands the ledger what failed.
type split struct {
	models []string
	router *actors.Router
	accs   []*actors.Batcher
	// last[i] is when accumulator i last got a message (-1: never);
	// checked[i] whether the state it left has been checked.
	last    []time.Duration
	checked []bool
	errs    []error
}

func newSplit(cfg Config) (*split, error) {
	sp := &split{models: cfg.splitModels()}
	var to []actors.Address
	for i, m := range sp.models {
		bc := cfg.Batcher
		if len(bc.Models) > 0 {
			mc := bc.Models[slices.IndexFunc(bc.Models, func(c actors.ModelConfig) bool { return c.Name == m })]
			bc.Models = []actors.ModelConfig{mc}
		}
		a, err := actors.NewBatcher(bc)
		if err != nil {
			return nil, fmt.Errorf("accumulator of %q: %w", m, err)
		}
		sp.accs = append(sp.accs, a)
		sp.last = append(sp.last, -1)
		sp.checked = append(sp.checked, true)
		to = append(to, AccumulatorAddr(i))
	}
	r, err := actors.NewRouter(sp.models, to)
	if err != nil {
		return nil, err
	}
	sp.router = r
	return sp, nil
}

// batchersOf is where a device holding models (empty: any) announces
// itself: the accumulators of those models, or all if it holds none of
// the split's.
func (sp *split) batchersOf(models []string) []actors.Address {
	var to []actors.Address
	for i, m := range sp.models {
		if len(models) == 0 || slices.Contains(models, m) {
			to = append(to, AccumulatorAddr(i))
		}
	}
	if len(to) == 0 {
		for i := range sp.models {
			to = append(to, AccumulatorAddr(i))
		}
	}
	return to
}

// stats sums the accumulators' counters (what the ledger's queue bound
// reads).
func (sp *split) stats() actors.BatcherStats {
	var s actors.BatcherStats
	for _, a := range sp.accs {
		s = s.Add(a.Stats())
	}
	return s
}

// Deliver implements Observer.
func (sp *split) Deliver(at time.Duration, _, to actors.Address, _ actors.Message) {
	i := int(to.ID) - int(AccumulatorAddrBase) - 1
	if to.Node != "" || i < 0 || i >= len(sp.accs) {
		return
	}
	sp.checkOne(i)
	sp.last[i], sp.checked[i] = at, false
}

func (sp *split) checkOne(i int) {
	if sp.checked[i] || sp.last[i] < 0 {
		return
	}
	sp.checked[i] = true
	if err := sp.accs[i].Check(sp.last[i]); err != nil && len(sp.errs) < 16 {
		sp.errs = append(sp.errs, fmt.Errorf("accumulator of %q: %w", sp.models[i], err))
	}
}

// check is the ledger's SelfCheck: the failures seen since its last call,
// and those of the states not checked yet.
func (sp *split) check(time.Duration) error {
	for i := range sp.accs {
		sp.checkOne(i)
	}
	if len(sp.errs) == 0 {
		return nil
	}
	err := sp.errs[0]
	sp.errs = sp.errs[1:]
	return err
}
