package wire

import (
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/member"
)

// Version is the wire version a node speaks (Hello.version).
const Version = 1

// Limits on what a decoder accepts.
const (
	// FrameMax bounds an encoded Data frame's envelopes, in bytes.
	FrameMax = 16 << 20
	// EnvelopesMax bounds the envelopes in one frame.
	EnvelopesMax = 1 << 16
	// modelsMax bounds a member update's warm models, in bytes (they come
	// from memberlist's metadata, at most 512 bytes).
	modelsMax = 4 << 10
)

// ErrUnknown is a message the schema has no case for: an actor message
// that does not cross nodes, or a newer node's message.
var ErrUnknown = errors.New("wire: unknown message")

// Encode converts one actor message from from to to into its envelope.
func Encode(from, to actors.Address, msg actors.Message) (*Envelope, error) {
	m, err := encodeMsg(msg, true)
	if err != nil {
		return nil, err
	}
	return &Envelope{From: addr(from), To: addr(to), Msg: m}, nil
}

// Decode converts an envelope back; anything the actors could not take
// (an unknown case, a value out of its type's range, a name over
// member.MaxNameLen) is an error.
func Decode(e *Envelope) (from, to actors.Address, msg actors.Message, err error) {
	if from, err = address(e.GetFrom()); err != nil {
		return
	}
	if to, err = address(e.GetTo()); err != nil {
		return
	}
	msg, err = decodeMsg(e.GetMsg(), true)
	return
}

// Marshal encodes envelopes as one frame's payload.
func Marshal(envs []*Envelope) ([]byte, error) {
	return proto.Marshal(&Envelopes{Envelopes: envs})
}

// Unmarshal decodes a frame's payload, within FrameMax and EnvelopesMax.
func Unmarshal(b []byte) ([]*Envelope, error) {
	if len(b) > FrameMax {
		return nil, fmt.Errorf("wire: frame of %d bytes, at most %d", len(b), FrameMax)
	}
	var es Envelopes
	if err := proto.Unmarshal(b, &es); err != nil {
		return nil, fmt.Errorf("wire: %w", err)
	}
	if len(es.Envelopes) > EnvelopesMax {
		return nil, fmt.Errorf("wire: %d envelopes in a frame, at most %d", len(es.Envelopes), EnvelopesMax)
	}
	return es.Envelopes, nil
}

func addr(a actors.Address) *Address {
	return &Address{Node: []byte(a.Node), Id: a.ID}
}

func address(a *Address) (actors.Address, error) {
	if len(a.GetNode()) > member.MaxNameLen {
		return actors.Address{}, fmt.Errorf("wire: node name of %d bytes, at most %d", len(a.GetNode()), member.MaxNameLen)
	}
	return actors.Address{Node: string(a.GetNode()), ID: a.GetId()}, nil
}

func ns(d time.Duration) int64  { return int64(d) }
func dur(n int64) time.Duration { return time.Duration(n) }

func bs(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

func strs(ss []string) [][]byte {
	if len(ss) == 0 {
		return nil
	}
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

func unstrs(bb [][]byte) []string {
	if len(bb) == 0 {
		return nil
	}
	out := make([]string, len(bb))
	for i, b := range bb {
		out[i] = string(b)
	}
	return out
}

func u64s(v []uint64) []uint64 {
	if len(v) == 0 {
		return nil
	}
	return v
}

func int8Of(v int32, what string) (int8, error) {
	if v < math.MinInt8 || v > math.MaxInt8 {
		return 0, fmt.Errorf("wire: %s %d out of range", what, v)
	}
	return int8(v), nil
}

func request(r actors.Request) *Request {
	return &Request{Id: r.ID, Tenant: bs(r.Tenant), Model: bs(r.Model), Version: bs(r.Version), Params: bs(r.Params),
		Priority: int32(r.Priority), Input: bs(r.Input), ArrivalNs: ns(r.Arrival), DeadlineNs: ns(r.Deadline), ReplyTo: addr(r.ReplyTo)}
}

func unrequest(r *Request) (actors.Request, error) {
	p, err := int8Of(r.GetPriority(), "priority")
	if err != nil {
		return actors.Request{}, err
	}
	to, err := address(r.GetReplyTo())
	if err != nil {
		return actors.Request{}, err
	}
	return actors.Request{ID: r.GetId(), Tenant: string(r.GetTenant()), Model: string(r.GetModel()), Version: string(r.GetVersion()),
		Params: string(r.GetParams()), Priority: p, Input: string(r.GetInput()), Arrival: dur(r.GetArrivalNs()),
		Deadline: dur(r.GetDeadlineNs()), ReplyTo: to}, nil
}

func encodeMsg(msg actors.Message, top bool) (*Message, error) {
	switch m := msg.(type) {
	case actors.Submit:
		return &Message{Body: &Message_Submit{Submit: &Submit{Req: request(m.Req)}}}, nil
	case actors.Cancel:
		return &Message{Body: &Message_Cancel{Cancel: &Cancel{Id: m.ID}}}, nil
	case actors.Drain:
		return &Message{Body: &Message_Drain{Drain: &Drain{}}}, nil
	case actors.Reply:
		return &Message{Body: &Message_Reply{Reply: &Reply{Id: m.ID, Outcome: uint32(m.Outcome), Output: bs(m.Output),
			Version: bs(m.Version), Reason: uint32(m.Reason), Err: bs(m.Err), RetryAfterNs: ns(m.RetryAfter),
			ArrivalNs: ns(m.Arrival), EnqueueNs: ns(m.Enqueue), DispatchNs: ns(m.Dispatch), DoneNs: ns(m.Done),
			BatchSize: int64(m.BatchSize), Attempts: int64(m.Attempts), Device: addr(m.Device)}}}, nil
	case actors.RunBatch:
		b := &Batch{Id: m.Batch.ID, Key: &Key{Model: bs(m.Batch.Key.Model), Version: bs(m.Batch.Key.Version),
			Params: bs(m.Batch.Key.Params), Bucket: int64(m.Batch.Key.Bucket)}, DispatchNs: ns(m.Batch.Dispatch)}
		for _, it := range m.Batch.Items {
			b.Items = append(b.Items, &Item{Req: request(it.Req), EnqueueNs: ns(it.Enqueue), Attempt: int64(it.Attempt), Group: it.Group})
		}
		return &Message{Body: &Message_RunBatch{RunBatch: &RunBatch{Batch: b, From: addr(m.From), Incarnation: m.Incarnation}}}, nil
	case actors.BatchDeclined:
		return &Message{Body: &Message_BatchDeclined{BatchDeclined: &BatchDeclined{Device: addr(m.Device), BatchId: m.BatchID}}}, nil
	case actors.DeviceReady:
		return &Message{Body: &Message_DeviceReady{DeviceReady: &DeviceReady{Device: addr(m.Device), Incarnation: m.Incarnation,
			Models: strs(m.Models), Offers: m.Offers, Running: m.Running, AheadNs: ns(m.Ahead)}}}, nil
	case actors.Offer:
		return &Message{Body: &Message_Offer{Offer: &Offer{Device: addr(m.Device), From: addr(m.From), Level: int32(m.Level), SlackNs: ns(m.Slack)}}}, nil
	case actors.Claim:
		return &Message{Body: &Message_Claim{Claim: &Claim{Device: addr(m.Device)}}}, nil
	case actors.Reannounce:
		return &Message{Body: &Message_Reannounce{Reannounce: &Reannounce{}}}, nil
	case actors.BatchDone:
		return &Message{Body: &Message_BatchDone{BatchDone: &BatchDone{Device: addr(m.Device), BatchId: m.BatchID, Isolated: u64s(m.Isolated)}}}, nil
	case actors.BatchAborted:
		return &Message{Body: &Message_BatchAborted{BatchAborted: &BatchAborted{Device: addr(m.Device), BatchId: m.BatchID,
			Pending: u64s(m.Pending), Reason: bs(m.Reason)}}}, nil
	case actors.DeviceBusy:
		return &Message{Body: &Message_DeviceBusy{DeviceBusy: &DeviceBusy{Device: addr(m.Device), Incarnation: m.Incarnation}}}, nil
	case actors.DeviceDown:
		return &Message{Body: &Message_DeviceDown{DeviceDown: &DeviceDown{Device: addr(m.Device), UntilNs: ns(m.Until), Reason: bs(m.Reason)}}}, nil
	case actors.Undeliverable:
		if !top {
			return nil, errors.New("wire: an Undeliverable inside an Undeliverable")
		}
		inner, err := encodeMsg(m.Msg, false)
		if err != nil {
			return nil, err
		}
		return &Message{Body: &Message_Undeliverable{Undeliverable: &Undeliverable{To: addr(m.To), Msg: inner}}}, nil
	case member.Update:
		return &Message{Body: &Message_MemberUpdate{MemberUpdate: &MemberUpdate{Node: bs(m.Node), Inc: m.Inc, Kind: uint32(m.Kind), Models: bs(m.Models)}}}, nil
	}
	return nil, fmt.Errorf("%w: %T", ErrUnknown, msg)
}

func decodeMsg(m *Message, top bool) (actors.Message, error) {
	switch b := m.GetBody().(type) {
	case *Message_Submit:
		r, err := unrequest(b.Submit.GetReq())
		return actors.Submit{Req: r}, err
	case *Message_Cancel:
		return actors.Cancel{ID: b.Cancel.GetId()}, nil
	case *Message_Drain:
		return actors.Drain{}, nil
	case *Message_Reply:
		r := b.Reply
		if r.GetOutcome() > uint32(actors.Cancelled) || r.GetReason() > uint32(actors.ReasonAttempts) {
			return nil, fmt.Errorf("wire: reply outcome %d, reason %d: out of range", r.GetOutcome(), r.GetReason())
		}
		dev, err := address(r.GetDevice())
		return actors.Reply{ID: r.GetId(), Outcome: actors.Outcome(r.GetOutcome()), Output: string(r.GetOutput()),
			Version: string(r.GetVersion()), Reason: actors.Reason(r.GetReason()), Err: string(r.GetErr()),
			RetryAfter: dur(r.GetRetryAfterNs()), Arrival: dur(r.GetArrivalNs()), Enqueue: dur(r.GetEnqueueNs()),
			Dispatch: dur(r.GetDispatchNs()), Done: dur(r.GetDoneNs()), BatchSize: int(r.GetBatchSize()),
			Attempts: int(r.GetAttempts()), Device: dev}, err
	case *Message_RunBatch:
		pb := b.RunBatch.GetBatch()
		k := pb.GetKey()
		batch := actors.Batch{ID: pb.GetId(), Key: actors.Key{Model: string(k.GetModel()), Version: string(k.GetVersion()),
			Params: string(k.GetParams()), Bucket: int(k.GetBucket())}, Dispatch: dur(pb.GetDispatchNs())}
		if n := len(pb.GetItems()); n > 0 {
			batch.Items = make([]actors.Item, n)
		}
		for i, it := range pb.GetItems() {
			r, err := unrequest(it.GetReq())
			if err != nil {
				return nil, err
			}
			batch.Items[i] = actors.Item{Req: r, Enqueue: dur(it.GetEnqueueNs()), Attempt: int(it.GetAttempt()), Group: it.GetGroup()}
		}
		from, err := address(b.RunBatch.GetFrom())
		return actors.RunBatch{Batch: batch, From: from, Incarnation: b.RunBatch.GetIncarnation()}, err
	case *Message_BatchDeclined:
		dev, err := address(b.BatchDeclined.GetDevice())
		return actors.BatchDeclined{Device: dev, BatchID: b.BatchDeclined.GetBatchId()}, err
	case *Message_DeviceReady:
		dev, err := address(b.DeviceReady.GetDevice())
		return actors.DeviceReady{Device: dev, Incarnation: b.DeviceReady.GetIncarnation(),
			Models: unstrs(b.DeviceReady.GetModels()), Offers: b.DeviceReady.GetOffers(), Running: b.DeviceReady.GetRunning(),
			Ahead: dur(b.DeviceReady.GetAheadNs())}, err
	case *Message_Offer:
		o := b.Offer
		lvl, err := int8Of(o.GetLevel(), "offer level")
		if err != nil {
			return nil, err
		}
		dev, err := address(o.GetDevice())
		if err != nil {
			return nil, err
		}
		from, err := address(o.GetFrom())
		return actors.Offer{Device: dev, From: from, Level: lvl, Slack: dur(o.GetSlackNs())}, err
	case *Message_Claim:
		dev, err := address(b.Claim.GetDevice())
		return actors.Claim{Device: dev}, err
	case *Message_Reannounce:
		return actors.Reannounce{}, nil
	case *Message_BatchDone:
		dev, err := address(b.BatchDone.GetDevice())
		return actors.BatchDone{Device: dev, BatchID: b.BatchDone.GetBatchId(), Isolated: u64s(b.BatchDone.GetIsolated())}, err
	case *Message_BatchAborted:
		a := b.BatchAborted
		dev, err := address(a.GetDevice())
		return actors.BatchAborted{Device: dev, BatchID: a.GetBatchId(), Pending: u64s(a.GetPending()), Reason: string(a.GetReason())}, err
	case *Message_DeviceBusy:
		dev, err := address(b.DeviceBusy.GetDevice())
		return actors.DeviceBusy{Device: dev, Incarnation: b.DeviceBusy.GetIncarnation()}, err
	case *Message_DeviceDown:
		dev, err := address(b.DeviceDown.GetDevice())
		return actors.DeviceDown{Device: dev, Until: dur(b.DeviceDown.GetUntilNs()), Reason: string(b.DeviceDown.GetReason())}, err
	case *Message_Undeliverable:
		if !top {
			return nil, errors.New("wire: an Undeliverable inside an Undeliverable")
		}
		to, err := address(b.Undeliverable.GetTo())
		if err != nil {
			return nil, err
		}
		inner, err := decodeMsg(b.Undeliverable.GetMsg(), false)
		if err != nil {
			return nil, err
		}
		return actors.Undeliverable{To: to, Msg: inner}, nil
	case *Message_MemberUpdate:
		u := b.MemberUpdate
		if u.GetKind() < uint32(member.Alive) || u.GetKind() > uint32(member.Left) || len(u.GetNode()) > member.MaxNameLen || len(u.GetModels()) > modelsMax {
			return nil, fmt.Errorf("wire: member update kind %d, name of %d bytes, models of %d: out of range", u.GetKind(), len(u.GetNode()), len(u.GetModels()))
		}
		return member.Update{Node: string(u.GetNode()), Inc: u.GetInc(), Kind: member.Kind(u.GetKind()), Models: string(u.GetModels())}, nil
	}
	return nil, ErrUnknown
}
