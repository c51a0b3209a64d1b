// Package wire is the binary protocol between farmem processes over a byte stream (TCP): compute
// processes talking to memory nodes (farmemd) and to each other's regions.
//
// # Frames
//
// Everything is a frame: a 16-byte header, then Len bytes of payload. Integers are
// little-endian.
//
//	offset size field
//	0      1    magic 0xFA
//	1      1    version (Version)
//	2      1    type (Type)
//	3      1    flags (FlagPartial on a Result; 0 otherwise)
//	4      4    payload length (at most the receiver's frame limit)
//	8      8    request id, chosen by the requester and echoed in the reply
//
// A connection starts with a handshake (Hello, Challenge, Auth, then Welcome or Refused); after
// it, the client sends requests (Batch, Call, Ctl, Ping) and the server answers each with a
// reply carrying the same id (Result, CallReply, CtlReply, Pong). Requests are pipelined: many
// may be outstanding, up to the limit the server announces in Welcome. The server handles a
// connection's Batch frames one at a time in arrival order, so batches on one connection apply
// in posting order and the ops of a batch in op order. A Batch whose ops are all unsignaled gets
// no Result. A Batch carries an expiry, and a server refuses one that reaches it later, applying
// nothing (StatusExpired). Replies to Calls may come in any order.
//
// A shared connection (Hello's purpose PurposeShared, since Version 4) carries the verbs of
// several clients of one process: each client has a channel, numbered 1 to 65535 by the
// process, which an Attach frame binds to the client before the channel's first request; the
// top 16 bits of every request id on the connection name its channel, and replies echo them. A
// Detach frame unbinds a channel. A request on a channel that is not bound (never attached,
// detached, or refused) is answered with a Detached frame (with the request's id) and not
// served; the server also detaches, and says so with a Detached frame, a channel whose client
// lost frames while the server was silent to it (a partition), so nothing posted after a lost
// frame applies. Pings (channel 0) are the connection's. Calls and Msgs are not carried on
// shared connections.
//
// A frame that does not decode (bad magic or version, unknown type, a length over the limit, a
// payload that does not parse) is a protocol violation: the receiver closes that connection,
// having sent an Error frame saying why where it can. A well-formed op the server refuses (out of
// bounds, misaligned, wrong region key) is not a violation: it fails with its own status.
//
// Decoders never panic on any input (each has a fuzz target) and encoders append to a caller's
// buffer, so the data path allocates nothing per frame.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/farmem/farmem/farmem"
)

// Magic is the first byte of every frame.
const Magic = 0xFA

// Version is the protocol version this package speaks. A peer with another version is refused
// during the handshake. Version 2 added the node's incarnation to Welcome; version 3 added the
// expiry of a Batch and the Msg frame (one-way messages); version 4 added shared connections
// (PurposeShared, the Attach, Detach and Detached frames, and the channel in a request id's top
// 16 bits on them).
const Version = 4

// HeaderSize is the size of a frame header.
const HeaderSize = 16

// DefaultMaxFrame is the default limit on a frame's payload: room for the largest single op
// (farmem.MaxOpBytes) with headroom. Batches larger than the limit are split by the sender into
// several frames.
const DefaultMaxFrame = farmem.MaxOpBytes + 1<<20

// MinMaxFrame is the smallest frame limit a server may announce.
const MinMaxFrame = 1 << 16

// Type is a frame's type.
type Type uint8

// Frame types. Requests have odd numbers below 0x40 and their replies the next even one;
// handshake and notice frames sit apart.
const (
	TypeHello     Type = 0x01 // client → server: nonce, node it expects, its client id, purpose
	TypeChallenge Type = 0x02 // server → client: nonce, node id
	TypeAuth      Type = 0x03 // client → server: MAC proving the cluster secret
	TypeWelcome   Type = 0x04 // server → client: the server's MAC, the region and the limits
	TypeRefused   Type = 0x06 // server → client: why the connection is refused; then close

	TypeBatch     Type = 0x11 // a batch of verbs for the server's region
	TypeResult    Type = 0x12 // the results of a Batch's signaled ops
	TypeCall      Type = 0x13 // a Call to a compute node's handler
	TypeCallReply Type = 0x14 // a Call's reply or error
	TypeCtl       Type = 0x15 // a control-plane request (info, membership)
	TypeCtlReply  Type = 0x16 // its reply
	TypePing      Type = 0x17 // liveness probe
	TypePong      Type = 0x18 // answer to a Ping
	TypeMsg       Type = 0x19 // a one-way message to a compute node's handler (since Version 3)
	// A Msg is acknowledged with an empty CallReply once its handler has run (or it was
	// dropped), which frees its place in the sender's outstanding window; the sender does not
	// wait for it.

	// On a shared connection (PurposeShared, since Version 4) the top 16 bits of a request's id
	// name its channel (ChannelOf), which an Attach frame has bound to one client.
	TypeAttach   Type = 0x1B // client → server: bind the id's channel to a client (no reply)
	TypeDetach   Type = 0x1D // client → server: unbind the id's channel (no reply)
	TypeDetached Type = 0x1E // server → client: the id's channel is not (or no longer) bound; why

	TypeError Type = 0x20 // a notice that the sender is closing the connection, and why
)

// ChannelOf is the channel a request id names on a shared connection: its top 16 bits.
func ChannelOf(id uint64) uint16 { return uint16(id >> 48) }

// ChannelID is the request id bits of channel ch (ChannelOf's inverse), to be or'ed with the
// requester's own 48 bits.
func ChannelID(ch uint16) uint64 { return uint64(ch) << 48 }

// AppendAttach appends an Attach frame binding channel ch to client to b.
func AppendAttach(b []byte, ch uint16, client farmem.ClientID) []byte {
	b = AppendHeader(b, Header{Type: TypeAttach, Len: 2, ID: ChannelID(ch)})
	return appendU16(b, uint16(client))
}

// DecodeAttach decodes an Attach payload: the client the channel is bound to (nonzero).
func DecodeAttach(p []byte) (farmem.ClientID, error) {
	r := reader{b: p}
	c := farmem.ClientID(r.u16("client"))
	if err := r.end("attach"); err != nil {
		return 0, err
	}
	if c == 0 {
		return 0, malformed("attach: client 0")
	}
	return c, nil
}

// AppendDetach appends a Detach frame unbinding channel ch to b.
func AppendDetach(b []byte, ch uint16) []byte {
	return AppendHeader(b, Header{Type: TypeDetach, ID: ChannelID(ch)})
}

// String names the type.
func (t Type) String() string {
	switch t {
	case TypeHello:
		return "hello"
	case TypeChallenge:
		return "challenge"
	case TypeAuth:
		return "auth"
	case TypeWelcome:
		return "welcome"
	case TypeRefused:
		return "refused"
	case TypeBatch:
		return "batch"
	case TypeResult:
		return "result"
	case TypeCall:
		return "call"
	case TypeCallReply:
		return "call-reply"
	case TypeMsg:
		return "msg"
	case TypeCtl:
		return "ctl"
	case TypeCtlReply:
		return "ctl-reply"
	case TypePing:
		return "ping"
	case TypePong:
		return "pong"
	case TypeAttach:
		return "attach"
	case TypeDetach:
		return "detach"
	case TypeDetached:
		return "detached"
	case TypeError:
		return "error"
	}
	return fmt.Sprintf("type(%#x)", uint8(t))
}

// Known reports whether t is a frame type of this version.
func (t Type) Known() bool {
	switch t {
	case TypeHello, TypeChallenge, TypeAuth, TypeWelcome, TypeRefused, TypeBatch, TypeResult,
		TypeCall, TypeCallReply, TypeCtl, TypeCtlReply, TypePing, TypePong, TypeMsg, TypeError,
		TypeAttach, TypeDetach, TypeDetached:
		return true
	}
	return false
}

// Flags on a frame header.
const (
	// FlagPartial on a Result: the server applied only the ops the Result answers and then went
	// down; the request's remaining ops were not applied.
	FlagPartial uint8 = 1 << 0
)

// ErrMalformed is wrapped by every decoding error: the input is not a valid frame of this
// version. The receiver closes the connection it came on.
var ErrMalformed = errors.New("wire: malformed frame")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// Header is a frame header.
type Header struct {
	Type  Type
	Flags uint8
	Len   uint32
	ID    uint64
}

// AppendHeader appends h's encoding to b.
func AppendHeader(b []byte, h Header) []byte {
	b = append(b, Magic, Version, byte(h.Type), h.Flags)
	b = binary.LittleEndian.AppendUint32(b, h.Len)
	return binary.LittleEndian.AppendUint64(b, h.ID)
}

// ParseHeader decodes a header from the first HeaderSize bytes of b and checks it against the
// receiver's frame limit.
func ParseHeader(b []byte, maxFrame uint32) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, malformed("header of %d bytes", len(b))
	}
	if b[0] != Magic {
		return Header{}, malformed("bad magic %#x", b[0])
	}
	if b[1] != Version {
		return Header{}, malformed("the peer speaks protocol version %d, this build speaks %d (a farmemd or client of another release)", b[1], Version)
	}
	h := Header{
		Type:  Type(b[2]),
		Flags: b[3],
		Len:   binary.LittleEndian.Uint32(b[4:]),
		ID:    binary.LittleEndian.Uint64(b[8:]),
	}
	if !h.Type.Known() {
		return Header{}, malformed("unknown frame type %#x", b[2])
	}
	if h.Flags&^FlagPartial != 0 || (h.Flags != 0 && h.Type != TypeResult) {
		return Header{}, malformed("flags %#x on a %v frame", h.Flags, h.Type)
	}
	if h.Len > maxFrame || h.Len == MaxFrameLen {
		return Header{}, malformed("%v frame of %d bytes exceeds the limit of %d", h.Type, h.Len, maxFrame)
	}
	return h, nil
}

// BeginFrame appends a header of type t and id with a zero length to b, and returns b and the
// offset of the header, for EndFrame to fill in the length once the payload is appended.
func BeginFrame(b []byte, t Type, flags uint8, id uint64) ([]byte, int) {
	start := len(b)
	return AppendHeader(b, Header{Type: t, Flags: flags, ID: id}), start
}

// MaxFrameLen is the largest value of a header's 32-bit length field. It is reserved: no
// receiver accepts it, whatever its frame limit, and EndFrame writes it for a payload too long
// for the field, so a length never wraps into a shorter, valid one.
const MaxFrameLen = 1<<32 - 1

// EndFrame sets the length of the frame whose header starts at start, given that its payload
// runs to the end of b. A payload of MaxFrameLen bytes or more gets the length MaxFrameLen,
// which every receiver refuses as malformed (senders bound their frames by the peer's limit
// long before that).
func EndFrame(b []byte, start int) []byte {
	binary.LittleEndian.PutUint32(b[start+4:], frameLen(len(b)-start-HeaderSize))
	return b
}

// frameLen is a payload length as the header's field: n itself below MaxFrameLen, else
// MaxFrameLen.
func frameLen(n int) uint32 {
	if n < 0 || uint64(n) >= MaxFrameLen {
		return MaxFrameLen
	}
	return uint32(n)
}

// reader walks a payload; the first short read sets err and every later read returns zeros.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = malformed("%s: need %d bytes, have %d", what, n, len(r.b))
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8(what string) uint8 {
	if v := r.take(1, what); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u16(what string) uint16 {
	if v := r.take(2, what); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}

func (r *reader) u32(what string) uint32 {
	if v := r.take(4, what); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (r *reader) u64(what string) uint64 {
	if v := r.take(8, what); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

// end fails if bytes are left over.
func (r *reader) end(what string) error {
	if r.err == nil && len(r.b) != 0 {
		r.err = malformed("%s: %d trailing bytes", what, len(r.b))
	}
	return r.err
}

func appendU16(b []byte, v uint16) []byte { return binary.LittleEndian.AppendUint16(b, v) }
func appendU32(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }
func appendU64(b []byte, v uint64) []byte { return binary.LittleEndian.AppendUint64(b, v) }
