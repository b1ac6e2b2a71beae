package actors

import "time"

// Outcome is the terminal state of a request. Every submitted request ends in
// exactly one.
type Outcome uint8

const (
	// Completed: the backend produced this request's output.
	Completed Outcome = iota + 1
	// Failed: the backend failed this item (a per-item error, a poison input
	// isolated by splitting, or retries exhausted).
	Failed
	// Rejected: admission refused the request (queue full, overload,
	// draining, bad request); RetryAfter says when to try again.
	Rejected
	// Expired: the deadline could no longer be met, so the request was failed
	// early rather than spend device time on it.
	Expired
	// Cancelled: the client withdrew the request while it was queued.
	Cancelled
)

var outcomeNames = [...]string{"", "completed", "failed", "rejected", "expired", "cancelled"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && o != 0 {
		return outcomeNames[o]
	}
	return "unknown"
}

// Request is one client request as the front door hands it to a Batcher.
type Request struct {
	// ID is unique among the requests a Batcher has in flight.
	ID     uint64
	Tenant string
	Model  string
	// Version is the model version; empty lets the batcher route the
	// request by the model's version weights.
	Version string
	// Params are the parameters that change the computation, in a
	// canonical form: requests share a batch only if they agree on them.
	Params string
	// Priority: higher levels are served first; 0 is normal. The batcher
	// clamps it to [PriorityLow, PriorityHigh].
	Priority int8
	Input    string
	// Arrival is when the front door received the request (runtime clock).
	Arrival time.Duration
	// Deadline is the absolute time by which the reply is useful. Zero means
	// Arrival plus the batcher's SLO.
	Deadline time.Duration
	// ReplyTo is where the one Reply for this request goes.
	ReplyTo Address
}

// Priority levels.
const (
	PriorityLow    int8 = -1
	PriorityNormal int8 = 0
	PriorityHigh   int8 = 1
)

// Key is the compatibility key: only requests with equal keys share a batch
// (unless BucketMerge lets a batch take shorter buckets of the same model
// version and parameters).
type Key struct {
	Model   string
	Version string
	Params  string
	// Bucket is the input-length bucket (see ModelConfig.BucketEdges).
	Bucket int
}

// Reason says why a request ended other than completed, so that a front
// door can map it to its own codes (HTTP: 400, 404, 429, 503, 504...).
type Reason uint8

const (
	ReasonNone         Reason = iota
	ReasonInvalid             // malformed: no model, input too long, duplicate id
	ReasonUnknownModel        // the model or version is not in the registry
	ReasonRateLimited         // the tenant is over its request rate
	ReasonQuota               // the tenant is over its requests in flight
	ReasonQueueFull           // a queue bound is reached
	ReasonOverloaded          // the predicted wait breaks the deadline
	ReasonNoDevice            // no device is up
	ReasonDraining            // the batcher is draining
	ReasonDeadline            // the deadline cannot be met (Expired)
	ReasonCancelled           // the client cancelled
	ReasonBackend             // the backend failed the item
	ReasonAttempts            // device failures used up the attempts
)

var reasonNames = [...]string{"", "invalid", "unknown_model", "rate_limited", "quota", "queue_full",
	"overloaded", "no_device", "draining", "deadline", "cancelled", "backend", "attempts"}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// Submit asks a Batcher to admit and serve a request.
type Submit struct{ Req Request }

// Cancel withdraws a queued request. A request already on a device runs to
// completion; its Reply still arrives.
type Cancel struct{ ID uint64 }

// Drain tells a Batcher to stop admitting and to flush every queue without
// lingering. Work already admitted is served.
type Drain struct{}

// Reply is the one terminal message for a request, sent to its ReplyTo.
type Reply struct {
	ID      uint64
	Outcome Outcome
	Output  string
	// Version is the model version that served (or would have served) the
	// request, after routing.
	Version string
	// Reason and Err say why, for any outcome other than Completed.
	Reason Reason
	Err    string
	// RetryAfter is the hint for Rejected replies.
	RetryAfter time.Duration
	// The request's timeline on the runtime clock. Enqueue, Dispatch and Done
	// are zero for steps it never reached.
	Arrival, Enqueue, Dispatch, Done time.Duration
	// BatchSize is the size of the batch that ran this request last.
	BatchSize int
	// Attempts is how many device runs this request was part of.
	Attempts int
	// Device ran the final attempt; zero if none did.
	Device Address
}

// Item is a request inside a batch.
type Item struct {
	Req Request
	// Enqueue is when the batcher accepted the request.
	Enqueue time.Duration
	// Attempt counts device runs of this item, this one included.
	Attempt int
	// Group, when not 0, isolates the item: it shares a batch only with
	// items of the same group. The batcher sets it for the requests of a
	// tenant that sent several poison inputs lately (see
	// BatcherConfig.PoisonMemoryMax).
	Group uint64
}

// Batch is a set of compatible items sent to one device.
type Batch struct {
	ID       uint64
	Key      Key
	Items    []Item
	Dispatch time.Duration
}

// RunBatch hands a batch to a device that announced it was ready. From is
// the batcher that sent it, where the device reports the batch's end (zero:
// the device's one batcher).
type RunBatch struct {
	Batch Batch
	From  Address
	// Incarnation is the device's, as the batcher knew it when it sent the
	// batch (0: unknown, any). A device that failed since drops the batch:
	// the batcher heard of the failure first (BatchAborted) and re-queued
	// it. Only a batch sent ahead (DeviceReady.Running) can cross a
	// failure that way.
	Incarnation uint64
	// Share is what the batcher tells the other batchers of a device that
	// serves several (DeviceReady.Offers); the device passes it on in its
	// DeviceBusy. Empty otherwise.
	Share Share
}

// Share is what one accumulator of a split tells the others that share a
// device with it, on every batch it sends there: the service it charged
// (so that a tenant charged on one model is charged on every model, and
// fair order compares like with like across accumulators) and the work it
// still queues (so that each plans admission and waits with the devices'
// competing demand, not as if the devices were its own). Eventually
// consistent: a lost or late Share only delays the others' view.
type Share struct {
	// Charges are the weighted service (device time over weight) the batch
	// added to each of its tenants.
	Charges []Charge
	// VTime is the sender's system virtual time once the batch left: the
	// others level a tenant back from idle no lower.
	VTime float64
	// Demand is what the sender queues once the batch left.
	Demand Demand
	// Queued names the tenants it still queues requests of (at most 64):
	// the others do not level them as idle (see Batcher.levelled).
	Queued []string
}

// Charge is one tenant's weighted service added by a batch.
type Charge struct {
	Tenant string
	Served float64
}

// Demand summarises an accumulator's queues for the others that share
// its devices.
type Demand struct {
	// Batches and Work are every queued batch (full ones and a partial
	// one per key) and their predicted device time: what goes ahead under
	// PolicySlack.
	Batches int
	Work    time.Duration
	// Keys and KeysWork are one batch per key that queues something, and
	// their device time: what goes ahead under PolicyFair of a tenant
	// served no less than LeastServed, the least weighted service of a
	// tenant queued there (0 when Keys is 0).
	Keys        int
	KeysWork    time.Duration
	LeastServed float64
	// Arriving and ArrivingWork are the keys that queue nothing now but
	// had requests arrive lately (at least one per SLO): a batch each by
	// the time a request admitted elsewhere waits, whatever the policy.
	Arriving     int
	ArrivingWork time.Duration
}

// BatchDeclined answers a RunBatch that reached a device already running
// another batcher's batch (in a cluster a device offers itself to the
// owners of each model it holds, and takes the first batch that comes).
// The batcher re-queues the items at the attempt they had, and counts the
// device busy until it announces itself again.
//
// A device asking ahead also declines the batch sent ahead (BatchID that
// one's, not the running one's) once its running batch failed as a whole:
// the split rounds that isolate the poison take about 2·log2(n) batch
// times. The batcher re-queues it, at the attempts it had, and forgets the
// ask; the device runs on.
type BatchDeclined struct {
	Device  Address
	BatchID uint64
}

// DeviceReady announces a device that can take a batch, after start or
// restart. A new Incarnation tells the batcher that whatever it had sent the
// device's earlier incarnation is lost and must be re-queued.
type DeviceReady struct {
	Device      Address
	Incarnation uint64
	// Models the device holds warm; empty means any.
	Models []string
	// Offers: the device serves several batchers (a cluster device whose
	// models have different owners). A batcher with a batch due for it
	// sends an Offer instead of the batch, and the batch only when the
	// device Claims it.
	Offers bool
	// Running, when not 0, is the batch the device still runs: it asks for
	// its next batch ahead of that one's end (DeviceConfig.AskAhead), and
	// holds what it gets until then. A batcher that no longer has that
	// batch on the device ignores it.
	Running uint64
	// Ahead, with Running, is how long before the running batch's
	// predicted end the device wants its next batch: a full one goes at
	// once, a partial one that is due from then on.
	Ahead time.Duration
}

// Offer tells a device that offered itself (DeviceReady.Offers) that From
// has a batch due for it: Level is its head's effective priority, Slack
// what its most urgent request has left once the batch has run. The device
// gathers offers for its offer window (DeviceConfig.OfferWindow; until
// every batcher it serves has offered, if sooner) and Claims the best one
// (Before). Served carries the head's tenant's weighted service under
// PolicyFair, so that the device orders the offers of several accumulators
// (one per model in a split) as one batcher orders its keys (see
// Batcher.before): the level, then the least served tenant, then the least
// slack. Served is 0 under PolicySlack, where the slack decides.
type Offer struct {
	Device, From Address
	// Priority is the head's own priority, Level its effective one (aged).
	Priority, Level int8
	// Tenant is the head's tenant, Served its weighted service.
	Tenant string
	Served float64
	Slack  time.Duration
}

// Before reports whether the device claims o before p: between heads of
// different priorities the higher effective level, then (heads of
// different tenants) the lower weighted service of the head's tenant,
// then the lesser slack (Batcher.before's
// order: aging lifts a request over higher priorities, never over its
// own, where the fair share decides).
func (o Offer) Before(p Offer) bool {
	switch {
	case o.Priority != p.Priority && o.Level != p.Level:
		return o.Level > p.Level
	case o.Tenant != p.Tenant && o.Served != p.Served:
		// The same tenant heads both: one batcher compares its service
		// with itself, a tie. Two accumulators' views of it differ by
		// the charges on their way, and compared they would give one of
		// them every device.
		return o.Served < p.Served
	}
	return o.Slack < p.Slack
}

// Claim asks the batcher whose Offer won for the batch. A batcher with
// nothing due any more answers Reannounce, and the device offers itself
// again.
type Claim struct{ Device Address }

// Reannounce asks a device to announce itself again with DeviceReady: a
// batcher sends it to its configured devices when it starts, since one
// that restarted knows no device. A device that is running a batch
// announces itself once the batch is done; one that is restarting does
// anyway.
type Reannounce struct{}

// BatchDone reports that a device has answered every item of a batch
// itself (completed or failed) and is ready for the next one.
type BatchDone struct {
	Device  Address
	BatchID uint64
	// Isolated lists the items that failed a run alone with a whole-batch
	// error after their batch failed: poison inputs, as splitting isolates
	// them. The batcher remembers them, so they cost no other request its
	// batch again.
	Isolated []uint64
}

// BatchAborted reports that a device failed (crashed, or hung past its
// watchdog) while running a batch. Pending lists the IDs of the items it did
// not answer; the batcher re-queues them with one more attempt. The device
// is restarting and announces itself again with DeviceReady, unless it is
// quarantined.
type BatchAborted struct {
	Device  Address
	BatchID uint64
	Pending []uint64
	Reason  string
}

// DeviceBusy tells the other batchers a device serves that it took a
// batch of one of them: they count it busy until it announces itself
// again, rather than send it a batch it would decline.
//
// FreeAt is when the device predicts that batch ends, so that they plan
// with the device's real availability; Share is what the batch's sender
// told them (RunBatch.Share).
type DeviceBusy struct {
	Device      Address
	Incarnation uint64
	// From is the batcher whose batch the device took.
	From   Address
	FreeAt time.Duration
	Share  Share
}

// DeviceDown reports that a device is quarantined: it keeps failing, and
// will not announce readiness again until Until.
type DeviceDown struct {
	Device Address
	Until  time.Duration
	Reason string
}

// Undeliverable comes back to the sender of Msg when the runtime knows Msg
// cannot reach To: its node is down (a refused connection) or unknown.
// Every actor must accept it; one that routes by membership routes around
// To's node at once instead of waiting for membership to declare it dead.
type Undeliverable struct {
	To  Address
	Msg Message
}

// PeerUp tells a front or a device of a cluster node that the node's data
// plane reaches Node again (a stream to it is up): one that routed around
// Node since a message to it came back Undeliverable takes it back,
// without waiting for it to return at a higher incarnation. Membership
// still decides whether Node is live.
type PeerUp struct{ Node string }

// Start is the first message a runtime delivers to every actor it spawns.
type Start struct{}
