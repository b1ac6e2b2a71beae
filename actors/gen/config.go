package gen

import (
	"fmt"
	"time"

	"github.com/batchd/batchd/actors"
)

// Config configures a Scheduler: one generation model version on a
// group of devices.
type Config struct {
	// Model and Version are the model version the scheduler serves.
	Model, Version string
	// Devices is the number of devices in the group; each has its own KV
	// cache and runs one step at a time.
	Devices int
	// BlockTokens is the KV-cache block size in tokens, and BlocksPerDevice
	// the blocks of one device's cache: the admission resource.
	BlockTokens     int
	BlocksPerDevice int
	// StepTokensMax is the per-step token budget: one token for each
	// decoding sequence, the rest for prefill chunks. It must be at least
	// SeqsMax, so that every running sequence decodes every step.
	StepTokensMax int
	// SeqsMax bounds the sequences running on one device.
	SeqsMax int
	// WaitingMax bounds the requests queued for admission; past it a new
	// request is Rejected (queue full).
	WaitingMax int
	// AdmitHeadroomBlocks are the free blocks a new sequence must leave
	// on its device, so that the running sequences can grow a while before
	// anyone is preempted (admitting into the last block preempts at the
	// next decode).
	AdmitHeadroomBlocks int
	// PreemptMax bounds the preemptions of one sequence: once preempted
	// that often, it is admitted again only with blocks for its whole
	// length (prompt plus MaxTokens), so it never needs another block and
	// is never a victim again.
	PreemptMax int
	// AttemptMax bounds the devices a sequence may run on that crash under
	// it: at the last, its stream ends Failed (attempts).
	AttemptMax int
	// PromptMax bounds a prompt's length in tokens.
	PromptMax int
	// TokensMax bounds a request's MaxTokens.
	TokensMax int
	// TTFT is the default time-to-first-token deadline after arrival, and
	// Timeout the default deadline of the whole output.
	TTFT    time.Duration
	Timeout time.Duration
	// ReplyMargin is held back from every TTFT deadline: the first token's
	// way from its step's end to the client (and a step's overrun of its
	// prediction), which come after the step the scheduler plans by. The
	// scheduler aims each first token ReplyMargin before its deadline, so
	// a request it admits is not answered past it. Zero in the simulator,
	// where tokens reach their client as their step ends.
	ReplyMargin time.Duration
	// PriorityAging is the wait after which a queued sequence counts one
	// priority level higher, so a lower level is never stuck for ever.
	PriorityAging time.Duration
	// Cost predicts a step's time (for the TTFT feasibility check and the
	// watchdog).
	Cost Cost
	// WatchdogMultiple: a step still running at this multiple of its
	// predicted time (plus WatchdogSlack) counts as a hung device.
	WatchdogMultiple float64
	WatchdogSlack    time.Duration
	// RestartBackoff is the first restart delay of a failed device; it
	// doubles with each failure in a row, up to 64 times.
	RestartBackoff time.Duration
	// Static turns continuous batching off, for comparison: queued
	// sequences are admitted only to a device with none running, so a
	// batch runs until its longest output is done before the next starts
	// (static batching; prefill is still chunked within StepTokensMax).
	Static bool
	// Tenants lists tenants with their own weight and limits; any other
	// tenant gets DefaultTenant. TenantsMax bounds the tenants tracked.
	Tenants       []actors.TenantConfig
	DefaultTenant actors.TenantConfig
	TenantsMax    int
}

// DefaultConfig returns a configuration for a 7B-class model on one or
// more 80 GB devices, in the ranges vLLM uses by default: 16-token blocks,
// 2048 of them (32k KV tokens) per device, a 512-token step budget (the
// chunked-prefill default of its scheduler), 64 sequences. The cost model
// is 8 ms a step, 40 µs a token fed (a full prefill step costs about 28
// ms), 0.5 µs a KV token read (64 sequences of 500 tokens, 16 ms). TTFT 1 s
// and 60 s for the whole output are interactive chat targets.
func DefaultConfig(model, version string, devices int) Config {
	return Config{
		Model:               model,
		Version:             version,
		Devices:             devices,
		BlockTokens:         16,
		BlocksPerDevice:     2048,
		StepTokensMax:       512,
		SeqsMax:             64,
		WaitingMax:          4096,
		AdmitHeadroomBlocks: 8,
		PreemptMax:          3,
		AttemptMax:          3,
		PromptMax:           8192,
		TokensMax:           4096,
		TTFT:                time.Second,
		Timeout:             60 * time.Second,
		PriorityAging:       time.Second,
		Cost:                Cost{Base: 8 * time.Millisecond, PerToken: 40 * time.Microsecond, PerKVToken: 500 * time.Nanosecond},
		WatchdogMultiple:    5,
		WatchdogSlack:       50 * time.Millisecond,
		RestartBackoff:      500 * time.Millisecond,
		TenantsMax:          1024,
	}
}

// Validate reports the first field that makes the configuration unusable.
func (c Config) Validate() error {
	switch {
	case c.Model == "":
		return fmt.Errorf("gen config: no model")
	case c.Devices < 1 || c.Devices > 1<<16:
		return fmt.Errorf("gen config: Devices %d: want 1..65536", c.Devices)
	case c.BlockTokens < 1 || c.BlocksPerDevice < 1:
		return fmt.Errorf("gen config: BlockTokens %d, BlocksPerDevice %d: must be positive", c.BlockTokens, c.BlocksPerDevice)
	case c.SeqsMax < 1 || c.StepTokensMax < c.SeqsMax:
		return fmt.Errorf("gen config: StepTokensMax %d, SeqsMax %d: want 1 <= SeqsMax <= StepTokensMax, so every running sequence decodes every step", c.StepTokensMax, c.SeqsMax)
	case c.WaitingMax < 1 || c.TenantsMax < 1:
		return fmt.Errorf("gen config: WaitingMax %d, TenantsMax %d: must be positive", c.WaitingMax, c.TenantsMax)
	case c.AdmitHeadroomBlocks < 0 || c.AdmitHeadroomBlocks >= c.BlocksPerDevice:
		return fmt.Errorf("gen config: AdmitHeadroomBlocks %d: want 0..BlocksPerDevice-1", c.AdmitHeadroomBlocks)
	case c.PreemptMax < 0 || c.AttemptMax < 1:
		return fmt.Errorf("gen config: PreemptMax %d, AttemptMax %d: want >= 0 and >= 1", c.PreemptMax, c.AttemptMax)
	case c.PromptMax < 1 || c.TokensMax < 1:
		return fmt.Errorf("gen config: PromptMax %d, TokensMax %d: must be positive", c.PromptMax, c.TokensMax)
	case c.TTFT <= 0 || c.Timeout < c.TTFT || c.PriorityAging <= 0:
		return fmt.Errorf("gen config: TTFT %v, Timeout %v, PriorityAging %v: want 0 < TTFT <= Timeout, PriorityAging > 0", c.TTFT, c.Timeout, c.PriorityAging)
	case c.ReplyMargin < 0 || c.ReplyMargin >= c.TTFT:
		return fmt.Errorf("gen config: ReplyMargin %v: want 0 <= ReplyMargin < TTFT %v", c.ReplyMargin, c.TTFT)
	case c.Cost.Base < 0 || c.Cost.PerToken < 0 || c.Cost.PerSample < 0 || c.Cost.PerKVToken < 0 || c.Cost.Of(1, 0, 1) <= 0:
		return fmt.Errorf("gen config: Cost %+v: must not be negative, nor all zero", c.Cost)
	case !(c.WatchdogMultiple >= 1) || c.WatchdogSlack < 0 || c.RestartBackoff <= 0:
		return fmt.Errorf("gen config: WatchdogMultiple %v, WatchdogSlack %v, RestartBackoff %v: want >= 1, >= 0, > 0", c.WatchdogMultiple, c.WatchdogSlack, c.RestartBackoff)
	}
	return nil
}
