package wire

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/member"
)

// crossing holds one value of every actor message that crosses nodes.
var crossing = []actors.Message{
	actors.Submit{}, actors.Cancel{}, actors.Drain{}, actors.Reply{}, actors.RunBatch{},
	actors.BatchDeclined{}, actors.DeviceReady{}, actors.Offer{}, actors.Claim{}, actors.Reannounce{},
	actors.BatchDone{}, actors.BatchAborted{}, actors.DeviceBusy{}, actors.DeviceDown{},
	actors.Undeliverable{Msg: actors.Cancel{}}, member.Update{Kind: member.Alive},
}

// Every case of the schema's Message has an actor message, and every one
// encodes and decodes.
func TestEveryCase(t *testing.T) {
	cases := (&Message{}).ProtoReflect().Descriptor().Oneofs().ByName("body").Fields().Len()
	if cases != len(crossing) {
		t.Fatalf("the schema has %d message cases, the test knows %d: add the new one to crossing and to message()", cases, len(crossing))
	}
	seen := map[reflect.Type]bool{}
	for _, m := range crossing {
		e, err := Encode(actors.Address{}, actors.Address{}, m)
		if err != nil {
			t.Fatalf("%T: %v", m, err)
		}
		if _, _, got, err := Decode(e); err != nil || reflect.TypeOf(got) != reflect.TypeOf(m) {
			t.Fatalf("%T decoded as %T, %v", m, got, err)
		}
		seen[reflect.TypeOf(m)] = true
	}
	if len(seen) != len(crossing) {
		t.Fatal("a message type is listed twice")
	}
	if _, err := Encode(actors.Address{}, actors.Address{}, actors.Start{}); !errors.Is(err, ErrUnknown) {
		t.Fatalf("a local message encoded: %v", err)
	}
}

func text(max int) *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		return string(rapid.SliceOfN(rapid.Byte(), 0, max).Draw(t, "bytes"))
	})
}

var (
	genNode = text(member.MaxNameLen)
	genStr  = text(64)
	genDur  = rapid.Custom(func(t *rapid.T) time.Duration { return time.Duration(rapid.Int64().Draw(t, "ns")) })
	genAddr = rapid.Custom(func(t *rapid.T) actors.Address {
		return actors.Address{Node: genNode.Draw(t, "node"), ID: rapid.Uint64().Draw(t, "id")}
	})
	genRequest = rapid.Custom(func(t *rapid.T) actors.Request {
		return actors.Request{ID: rapid.Uint64().Draw(t, "id"), Tenant: genStr.Draw(t, "tenant"), Model: genStr.Draw(t, "model"),
			Version: genStr.Draw(t, "version"), Params: genStr.Draw(t, "params"), Priority: rapid.Int8().Draw(t, "prio"),
			Input: genStr.Draw(t, "input"), Arrival: genDur.Draw(t, "arrival"), Deadline: genDur.Draw(t, "deadline"), ReplyTo: genAddr.Draw(t, "replyTo")}
	})
)

// nilIfEmpty draws a slice, nil when empty (as the decoder gives it).
func nilIfEmpty[T any](t *rapid.T, g *rapid.Generator[T], name string) []T {
	s := rapid.SliceOfN(g, 0, 8).Draw(t, name)
	if len(s) == 0 {
		return nil
	}
	return s
}

// message draws any crossing message; nested: not an Undeliverable.
func message(nested bool) *rapid.Generator[actors.Message] {
	return rapid.Custom(func(t *rapid.T) actors.Message {
		n := len(crossing)
		if nested {
			n-- // the Undeliverable is drawn as the 15th case; skip it
		}
		switch i := rapid.IntRange(0, n-1).Draw(t, "case"); {
		case i == 0:
			return actors.Submit{Req: genRequest.Draw(t, "req")}
		case i == 1:
			return actors.Cancel{ID: rapid.Uint64().Draw(t, "id")}
		case i == 2:
			return actors.Drain{}
		case i == 3:
			return actors.Reply{ID: rapid.Uint64().Draw(t, "id"), Outcome: actors.Outcome(rapid.IntRange(0, int(actors.Cancelled)).Draw(t, "outcome")),
				Output: genStr.Draw(t, "output"), Version: genStr.Draw(t, "version"), Reason: actors.Reason(rapid.IntRange(0, int(actors.ReasonAttempts)).Draw(t, "reason")),
				Err: genStr.Draw(t, "err"), RetryAfter: genDur.Draw(t, "retry"), Arrival: genDur.Draw(t, "a"), Enqueue: genDur.Draw(t, "e"),
				Dispatch: genDur.Draw(t, "d"), Done: genDur.Draw(t, "done"), BatchSize: rapid.Int().Draw(t, "size"),
				Attempts: rapid.Int().Draw(t, "attempts"), Device: genAddr.Draw(t, "device")}
		case i == 4:
			items := nilIfEmpty(t, rapid.Custom(func(t *rapid.T) actors.Item {
				return actors.Item{Req: genRequest.Draw(t, "req"), Enqueue: genDur.Draw(t, "enq"), Attempt: rapid.Int().Draw(t, "attempt"), Group: rapid.Uint64().Draw(t, "group")}
			}), "items")
			return actors.RunBatch{Batch: actors.Batch{ID: rapid.Uint64().Draw(t, "id"),
				Key:   actors.Key{Model: genStr.Draw(t, "m"), Version: genStr.Draw(t, "v"), Params: genStr.Draw(t, "p"), Bucket: rapid.Int().Draw(t, "bucket")},
				Items: items, Dispatch: genDur.Draw(t, "dispatch")}, From: genAddr.Draw(t, "from"), Incarnation: rapid.Uint64().Draw(t, "inc")}
		case i == 5:
			return actors.BatchDeclined{Device: genAddr.Draw(t, "device"), BatchID: rapid.Uint64().Draw(t, "batch")}
		case i == 6:
			return actors.DeviceReady{Device: genAddr.Draw(t, "device"), Incarnation: rapid.Uint64().Draw(t, "inc"),
				Models: nilIfEmpty(t, genStr, "models"), Offers: rapid.Bool().Draw(t, "offers"), Running: rapid.Uint64().Draw(t, "running"), Ahead: genDur.Draw(t, "ahead")}
		case i == 7:
			return actors.Offer{Device: genAddr.Draw(t, "device"), From: genAddr.Draw(t, "from"), Level: rapid.Int8().Draw(t, "level"), Slack: genDur.Draw(t, "slack")}
		case i == 8:
			return actors.Claim{Device: genAddr.Draw(t, "device")}
		case i == 9:
			return actors.Reannounce{}
		case i == 10:
			return actors.BatchDone{Device: genAddr.Draw(t, "device"), BatchID: rapid.Uint64().Draw(t, "batch"), Isolated: nilIfEmpty(t, rapid.Uint64(), "isolated")}
		case i == 11:
			return actors.BatchAborted{Device: genAddr.Draw(t, "device"), BatchID: rapid.Uint64().Draw(t, "batch"),
				Pending: nilIfEmpty(t, rapid.Uint64(), "pending"), Reason: genStr.Draw(t, "reason")}
		case i == 12:
			return actors.DeviceBusy{Device: genAddr.Draw(t, "device"), Incarnation: rapid.Uint64().Draw(t, "inc")}
		case i == 13:
			return actors.DeviceDown{Device: genAddr.Draw(t, "device"), Until: genDur.Draw(t, "until"), Reason: genStr.Draw(t, "reason")}
		case i == 14:
			return member.Update{Node: genNode.Draw(t, "node"), Inc: rapid.Uint64().Draw(t, "inc"),
				Kind: member.Kind(rapid.IntRange(int(member.Alive), int(member.Left)).Draw(t, "kind")), Models: genStr.Draw(t, "models")}
		default:
			return actors.Undeliverable{To: genAddr.Draw(t, "to"), Msg: message(true).Draw(t, "msg")}
		}
	})
}

// Any batch of crossing messages, encoded, marshalled, unmarshalled and
// decoded, is what was sent, in order.
func TestPropertyRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		type sent struct {
			from, to actors.Address
			msg      actors.Message
		}
		msgs := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) sent {
			return sent{genAddr.Draw(t, "from"), genAddr.Draw(t, "to"), message(false).Draw(t, "msg")}
		}), 1, 16).Draw(t, "msgs")
		var envs []*Envelope
		for _, s := range msgs {
			e, err := Encode(s.from, s.to, s.msg)
			if err != nil {
				t.Fatalf("encode %T: %v", s.msg, err)
			}
			envs = append(envs, e)
		}
		b, err := Marshal(envs)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Unmarshal(b)
		if err != nil || len(got) != len(msgs) {
			t.Fatalf("unmarshal: %d envelopes, %v", len(got), err)
		}
		for i, e := range got {
			from, to, m, err := Decode(e)
			if err != nil {
				t.Fatalf("decode %T: %v", msgs[i].msg, err)
			}
			if from != msgs[i].from || to != msgs[i].to || !reflect.DeepEqual(m, msgs[i].msg) {
				t.Fatalf("message %d: sent %#v, got %#v", i, msgs[i].msg, m)
			}
		}
	})
}

// Out-of-range values are refused, not passed to the actors.
func TestDecodeRefuses(t *testing.T) {
	long := make([]byte, member.MaxNameLen+1)
	bad := []*Message{
		{Body: &Message_Reply{Reply: &Reply{Outcome: uint32(actors.Cancelled) + 1}}},
		{Body: &Message_Reply{Reply: &Reply{Reason: uint32(actors.ReasonAttempts) + 1}}},
		{Body: &Message_Submit{Submit: &Submit{Req: &Request{Priority: 128}}}},
		{Body: &Message_Offer{Offer: &Offer{Level: -129}}},
		{Body: &Message_MemberUpdate{MemberUpdate: &MemberUpdate{Kind: 0}}},
		{Body: &Message_MemberUpdate{MemberUpdate: &MemberUpdate{Kind: 5}}},
		{Body: &Message_Claim{Claim: &Claim{Device: &Address{Node: long}}}},
		{Body: &Message_Undeliverable{Undeliverable: &Undeliverable{Msg: &Message{Body: &Message_Undeliverable{Undeliverable: &Undeliverable{}}}}}},
		{},
	}
	for i, m := range bad {
		if _, _, got, err := Decode(&Envelope{Msg: m}); err == nil {
			t.Errorf("case %d decoded as %#v", i, got)
		}
	}
	if _, err := Encode(actors.Address{}, actors.Address{}, actors.Undeliverable{Msg: actors.Undeliverable{Msg: actors.Drain{}}}); err == nil {
		t.Error("a nested Undeliverable encoded")
	}
	if _, err := Unmarshal(make([]byte, FrameMax+1)); err == nil {
		t.Error("a frame over FrameMax unmarshalled")
	}
}

// FuzzDecode: any bytes as a frame's payload either fail to decode or
// decode to messages that survive a second round trip unchanged.
func FuzzDecode(f *testing.F) {
	for _, m := range crossing {
		e, _ := Encode(actors.Address{Node: "a", ID: 1}, actors.Address{Node: "b", ID: 2}, m)
		b, _ := Marshal([]*Envelope{e})
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		envs, err := Unmarshal(b)
		if err != nil {
			return
		}
		for _, e := range envs {
			from, to, m, err := Decode(e)
			if err != nil {
				continue
			}
			e2, err := Encode(from, to, m)
			if err != nil {
				t.Fatalf("decoded %#v does not encode: %v", m, err)
			}
			b2, err := proto.Marshal(e2)
			if err != nil {
				t.Fatal(err)
			}
			var e3 Envelope
			if err := proto.Unmarshal(b2, &e3); err != nil {
				t.Fatal(err)
			}
			f2, t2, m2, err := Decode(&e3)
			if err != nil || f2 != from || t2 != to || !reflect.DeepEqual(m2, m) {
				t.Fatalf("second round trip: %#v became %#v (%v)", m, m2, err)
			}
		}
	})
}

// FuzzFrame: any bytes as a stream frame (what the server reads before it
// checks anything) either fail to decode or decode to a Hello or a Data
// whose payload goes through the envelope decoder without a panic.
func FuzzFrame(f *testing.F) {
	hello, _ := proto.Marshal(&Frame{Body: &Frame_Hello{Hello: &Hello{Version: Version, Node: []byte("a"), Peer: []byte("b"), Nonce: make([]byte, 32)}}})
	e, _ := Encode(actors.Address{Node: "a"}, actors.Address{Node: "b"}, actors.Cancel{ID: 1})
	payload, _ := Marshal([]*Envelope{e})
	data, _ := proto.Marshal(&Frame{Body: &Frame_Data{Data: &Data{Seq: 1, Envelopes: payload, Mac: make([]byte, 32)}}})
	f.Add(hello)
	f.Add(data)
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr Frame
		if err := proto.Unmarshal(b, &fr); err != nil {
			return
		}
		if d := fr.GetData(); d != nil {
			envs, err := Unmarshal(d.GetEnvelopes())
			if err != nil {
				return
			}
			for _, e := range envs {
				Decode(e)
			}
		}
	})
}
