package wire

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// The handshake proves, both ways, that each side holds the cluster secret, without sending it:
//
//	client → Hello     nonce [32] | node u16 | client u16 | purpose u8
//	server → Challenge nonce [32] | node u16 | role u8
//	client → Auth      mac [32]   = HMAC-SHA256(secret, "farmem/1 client" | Hello | Challenge)
//	server → Welcome   mac [32]   = HMAC-SHA256(secret, "farmem/1 server" | Hello | Challenge)
//	                   | node u16 | role u8 | size u64 | key u32 | maxFrame u32 | maxOutstanding u32
//	                   | incarnation u64
//	   or    Refused   reason u8 | message (UTF-8, the rest)
//
// Hello's node is the node id the client expects at that address (0: any); client is the
// client id the connection carries verbs for (0 on a control connection). Both nonces are
// fresh random bytes, so a recorded handshake cannot be replayed. The key in Welcome is the
// region key every op must name. The incarnation (added in protocol version 2) is the random,
// nonzero 64-bit id the node's process drew when it started: a client that finds another
// incarnation at a node's address than the one it knew knows the node restarted and lost its
// memory (see farmem.ErrNodeLost); the same incarnation means the node was only unreachable.

// NonceSize and MACSize are the sizes of handshake nonces and MACs.
const (
	NonceSize = 32
	MACSize   = sha256.Size
)

// Purpose says what a connection is for.
type Purpose uint8

const (
	// PurposeData carries one client's verbs and Calls.
	PurposeData Purpose = 1
	// PurposeControl carries control-plane requests (info, membership, provider setup).
	PurposeControl Purpose = 2
	// PurposeShared carries the verbs of several clients of one process, each on a channel
	// (Attach); Hello's client is 0 (since Version 4).
	PurposeShared Purpose = 3
)

// Hello opens a connection.
type Hello struct {
	Nonce   [NonceSize]byte
	Node    farmem.NodeID
	Client  farmem.ClientID
	Purpose Purpose
}

// Append appends h's payload to b.
func (h *Hello) Append(b []byte) []byte {
	b = append(b, h.Nonce[:]...)
	b = appendU16(b, uint16(h.Node))
	b = appendU16(b, uint16(h.Client))
	return append(b, byte(h.Purpose))
}

// DecodeHello decodes a Hello payload.
func DecodeHello(p []byte) (Hello, error) {
	r := reader{b: p}
	var h Hello
	copy(h.Nonce[:], r.take(NonceSize, "nonce"))
	h.Node = farmem.NodeID(r.u16("node"))
	h.Client = farmem.ClientID(r.u16("client"))
	h.Purpose = Purpose(r.u8("purpose"))
	if err := r.end("hello"); err != nil {
		return Hello{}, err
	}
	if h.Purpose != PurposeData && h.Purpose != PurposeControl && h.Purpose != PurposeShared {
		return Hello{}, malformed("hello: purpose %d", h.Purpose)
	}
	return h, nil
}

// Challenge answers a Hello.
type Challenge struct {
	Nonce [NonceSize]byte
	Node  farmem.NodeID
	Role  farmem.Role
}

// Append appends c's payload to b.
func (c *Challenge) Append(b []byte) []byte {
	b = append(b, c.Nonce[:]...)
	b = appendU16(b, uint16(c.Node))
	return append(b, byte(c.Role))
}

// DecodeChallenge decodes a Challenge payload.
func DecodeChallenge(p []byte) (Challenge, error) {
	r := reader{b: p}
	var c Challenge
	copy(c.Nonce[:], r.take(NonceSize, "nonce"))
	c.Node = farmem.NodeID(r.u16("node"))
	c.Role = farmem.Role(r.u8("role"))
	if err := r.end("challenge"); err != nil {
		return Challenge{}, err
	}
	if err := checkRole(c.Node, c.Role); err != nil {
		return Challenge{}, err
	}
	return c, nil
}

func checkRole(n farmem.NodeID, r farmem.Role) error {
	if n == 0 || n == farmem.ComputeNodeBit || transport.RoleOf(n) != r {
		return malformed("node %v with role %v", n, r)
	}
	return nil
}

// MAC computes a handshake MAC: side is "client" or "server", hello and challenge the payloads
// as sent.
func MAC(secret []byte, side string, hello, challenge []byte) [MACSize]byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("farmem/1 " + side))
	m.Write(hello)
	m.Write(challenge)
	var out [MACSize]byte
	m.Sum(out[:0])
	return out
}

// CheckMAC reports, in constant time, whether got is the MAC want.
func CheckMAC(got, want [MACSize]byte) bool { return hmac.Equal(got[:], want[:]) }

// DecodeAuth decodes an Auth payload: the client's MAC.
func DecodeAuth(p []byte) ([MACSize]byte, error) {
	r := reader{b: p}
	var mac [MACSize]byte
	copy(mac[:], r.take(MACSize, "mac"))
	return mac, r.end("auth")
}

// Welcome admits a client and describes the server's region.
type Welcome struct {
	MAC  [MACSize]byte
	Node farmem.NodeID
	Role farmem.Role
	// Size is the region's size in bytes.
	Size uint64
	// Key is the region key every op must carry.
	Key uint32
	// MaxFrame is the largest frame payload the server accepts; MaxOutstanding the most
	// requests a client may have unanswered on the connection.
	MaxFrame       uint32
	MaxOutstanding uint32
	// Incarnation identifies the node's process: random, nonzero, drawn at its start.
	Incarnation uint64
}

// Append appends w's payload to b.
func (w *Welcome) Append(b []byte) []byte {
	b = append(b, w.MAC[:]...)
	b = appendU16(b, uint16(w.Node))
	b = append(b, byte(w.Role))
	b = appendU64(b, w.Size)
	b = appendU32(b, w.Key)
	b = appendU32(b, w.MaxFrame)
	b = appendU32(b, w.MaxOutstanding)
	return appendU64(b, w.Incarnation)
}

// DecodeWelcome decodes a Welcome payload.
func DecodeWelcome(p []byte) (Welcome, error) {
	r := reader{b: p}
	var w Welcome
	copy(w.MAC[:], r.take(MACSize, "mac"))
	w.Node = farmem.NodeID(r.u16("node"))
	w.Role = farmem.Role(r.u8("role"))
	w.Size = r.u64("size")
	w.Key = r.u32("key")
	w.MaxFrame = r.u32("max frame")
	w.MaxOutstanding = r.u32("max outstanding")
	w.Incarnation = r.u64("incarnation")
	if err := r.end("welcome"); err != nil {
		return Welcome{}, err
	}
	if err := checkRole(w.Node, w.Role); err != nil {
		return Welcome{}, err
	}
	switch {
	case w.Size == 0 || w.Size > farmem.MaxOffset+1:
		return Welcome{}, malformed("welcome: region size %d", w.Size)
	case w.MaxFrame < MinMaxFrame:
		return Welcome{}, malformed("welcome: frame limit %d below %d", w.MaxFrame, MinMaxFrame)
	case w.MaxOutstanding == 0:
		return Welcome{}, malformed("welcome: no outstanding requests allowed")
	case w.Incarnation == 0:
		return Welcome{}, malformed("welcome: incarnation 0")
	}
	return w, nil
}

// Reason says why a connection was refused.
type Reason uint8

// Reasons for Refused.
const (
	ReasonAuth     Reason = 1 // the client did not prove the cluster secret
	ReasonNode     Reason = 2 // the client expected another node at this address
	ReasonBusy     Reason = 3 // the server is at its connection limit
	ReasonShutdown Reason = 4 // the server is shutting down
	ReasonProtocol Reason = 5 // the handshake was malformed
)

func (r Reason) String() string {
	switch r {
	case ReasonAuth:
		return "authentication failed"
	case ReasonNode:
		return "wrong node"
	case ReasonBusy:
		return "too many connections"
	case ReasonShutdown:
		return "shutting down"
	case ReasonProtocol:
		return "protocol error"
	}
	return "refused"
}

// MaxMessage is the longest message a Refused, Error or failed reply carries.
const MaxMessage = 1024

// AppendMessage appends a status or reason byte and a message, cut to MaxMessage bytes at a
// UTF-8 boundary.
func AppendMessage(b []byte, code uint8, msg string) []byte {
	if len(msg) > MaxMessage {
		msg = msg[:MaxMessage]
		for len(msg) > 0 && !utf8.ValidString(msg) {
			msg = msg[:len(msg)-1]
		}
	}
	return append(append(b, code), msg...)
}

// DecodeMessage decodes a Refused or Error payload: a code byte and a UTF-8 message. Invalid
// UTF-8 is replaced, so the message is safe to log.
func DecodeMessage(p []byte) (uint8, string, error) {
	if len(p) == 0 {
		return 0, "", malformed("empty message frame")
	}
	if len(p)-1 > MaxMessage {
		return 0, "", malformed("message of %d bytes", len(p)-1)
	}
	return p[0], string([]rune(string(p[1:]))), nil
}

// RefusedError is a Refused frame received during the handshake.
type RefusedError struct {
	Reason Reason
	Msg    string
}

func (e *RefusedError) Error() string { return fmt.Sprintf("refused (%v): %s", e.Reason, e.Msg) }

// ErrPeerAuth: the server's Welcome did not prove the cluster secret.
var ErrPeerAuth = errors.New("wire: the node did not prove the cluster secret")

// ErrWrongNode: the server is not the node the client expected.
var ErrWrongNode = errors.New("wire: not the node expected")

// ClientHandshake runs the client side of the handshake over w and r (deadlines are the
// caller's): it sends Hello, answers the Challenge, and checks the Welcome's proof. A Refused
// frame is returned as *RefusedError.
func ClientHandshake(w io.Writer, r io.Reader, expect farmem.NodeID, client farmem.ClientID, purpose Purpose, secret []byte) (Welcome, error) {
	hello := Hello{Node: expect, Client: client, Purpose: purpose}
	if _, err := rand.Read(hello.Nonce[:]); err != nil {
		return Welcome{}, err
	}
	hp := hello.Append(nil)
	b, start := BeginFrame(nil, TypeHello, 0, 0)
	if _, err := w.Write(EndFrame(append(b, hp...), start)); err != nil {
		return Welcome{}, err
	}
	var hdr [HeaderSize]byte
	next := func(want Type) ([]byte, error) {
		h, p, err := ReadFrame(r, &hdr, nil, 4096)
		if err != nil {
			return nil, err
		}
		if h.Type == TypeRefused {
			code, msg, err := DecodeMessage(p)
			if err != nil {
				return nil, err
			}
			return nil, &RefusedError{Reason: Reason(code), Msg: msg}
		}
		if h.Type != want {
			return nil, malformed("%v frame instead of %v", h.Type, want)
		}
		return p, nil
	}
	cp, err := next(TypeChallenge)
	if err != nil {
		return Welcome{}, err
	}
	ch, err := DecodeChallenge(cp)
	if err != nil {
		return Welcome{}, err
	}
	if expect != 0 && ch.Node != expect {
		return Welcome{}, fmt.Errorf("%w: expected %v, found %v", ErrWrongNode, expect, ch.Node)
	}
	mac := MAC(secret, "client", hp, cp)
	b, start = BeginFrame(b[:0], TypeAuth, 0, 0)
	if _, err := w.Write(EndFrame(append(b, mac[:]...), start)); err != nil {
		return Welcome{}, err
	}
	wp, err := next(TypeWelcome)
	if err != nil {
		return Welcome{}, err
	}
	wel, err := DecodeWelcome(wp)
	if err != nil {
		return Welcome{}, err
	}
	if !CheckMAC(wel.MAC, MAC(secret, "server", hp, cp)) {
		return Welcome{}, fmt.Errorf("%w: %v", ErrPeerAuth, ch.Node)
	}
	if wel.Node != ch.Node {
		return Welcome{}, malformed("welcome from %v after a challenge from %v", wel.Node, ch.Node)
	}
	return wel, nil
}
