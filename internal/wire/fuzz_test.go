package wire

import (
	"bytes"
	"testing"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// Every decoder is fuzzed: no input panics, and whatever decodes re-encodes to the same bytes.

func FuzzParseHeader(f *testing.F) {
	f.Add(AppendHeader(nil, Header{Type: TypeBatch, Len: 10, ID: 1}))
	f.Add(AppendHeader(nil, Header{Type: TypeResult, Flags: FlagPartial, Len: 3}))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHeader(b, 1<<20)
		if err != nil {
			return
		}
		if got := AppendHeader(nil, h); !bytes.Equal(got, b[:HeaderSize]) {
			t.Fatalf("re-encoded %x, want %x", got, b[:HeaderSize])
		}
	})
}

func FuzzDecodeBatch(f *testing.F) {
	f.Add(encodeBatch(sampleOps(), 7))
	f.Add(encodeBatch(sampleOps()[2:3], 0))
	f.Add([]byte{1, 0, 9})
	f.Add(AppendOp(AppendBatchHeader(nil, 1, 1_700_000_000_000_000_000), &sampleOps()[0], 3))
	f.Fuzz(func(t *testing.T, p []byte) {
		ops, expiry, err := DecodeBatchExpiry(p, nil)
		if err != nil {
			return
		}
		b := AppendBatchHeader(nil, len(ops), expiry)
		for _, o := range ops {
			fo := farmem.Op{Kind: o.Kind, Addr: farmem.MakeAddr(1, o.Off), Unsignaled: o.Unsignaled,
				Cmp: o.Cmp, Swap: o.Swap, CmpMask: o.CmpMask, SwapMask: o.SwapMask}
			switch o.Kind {
			case farmem.OpRead:
				fo.Buf = make([]byte, o.Len)
			case farmem.OpWrite:
				fo.Buf = o.Data
			}
			b = AppendOp(b, &fo, o.Key)
			_ = o.Check(1<<20, 1)
		}
		if !bytes.Equal(b, p) {
			t.Fatalf("re-encoded %x, want %x", b, p)
		}
	})
}

func FuzzResults(f *testing.F) {
	b := AppendResultCount(nil, 3)
	b, dst := AppendRead(b, 4)
	copy(dst, "abcd")
	b = AppendWord(b, 9)
	b = AppendStatus(b, StatusBadKey)
	f.Add(b, []byte{0, 3, 2})
	f.Add([]byte{1, 0, 0}, []byte{1})
	f.Fuzz(func(t *testing.T, p []byte, shape []byte) {
		var rs Results
		n, err := rs.Reset(p)
		if err != nil {
			return
		}
		for i := 0; i < n && i < len(shape); i++ {
			kind := farmem.OpKind(shape[i] % byte(farmem.NumOpKinds+1))
			s, _, data, err := rs.Next(kind, int(shape[i]))
			if err != nil {
				return
			}
			if s == StatusOK && kind == farmem.OpRead && len(data) != int(shape[i]) {
				t.Fatalf("read result of %d bytes, want %d", len(data), shape[i])
			}
			_ = s.Err()
		}
		_ = rs.End()
	})
}

func FuzzHandshake(f *testing.F) {
	f.Add(byte(0), (&Hello{Node: 1, Purpose: PurposeControl}).Append(nil))
	f.Add(byte(1), (&Challenge{Node: 1, Role: farmem.RoleMemory}).Append(nil))
	f.Add(byte(2), make([]byte, MACSize))
	f.Add(byte(3), (&Welcome{Node: 1, Role: farmem.RoleMemory, Size: 8, MaxFrame: MinMaxFrame, MaxOutstanding: 1, Incarnation: 7}).Append(nil))
	f.Add(byte(4), AppendMessage(nil, 1, "no"))
	f.Fuzz(func(t *testing.T, which byte, p []byte) {
		var re []byte
		switch which % 5 {
		case 0:
			h, err := DecodeHello(p)
			if err != nil {
				return
			}
			re = h.Append(nil)
		case 1:
			c, err := DecodeChallenge(p)
			if err != nil {
				return
			}
			re = c.Append(nil)
		case 2:
			m, err := DecodeAuth(p)
			if err != nil {
				return
			}
			re = m[:]
		case 3:
			w, err := DecodeWelcome(p)
			if err != nil {
				return
			}
			re = w.Append(nil)
		case 4:
			_, msg, err := DecodeMessage(p)
			if err == nil && len(msg) > 4*MaxMessage {
				t.Fatalf("message of %d bytes", len(msg))
			}
			return
		}
		if !bytes.Equal(re, p) {
			t.Fatalf("re-encoded %x, want %x", re, p)
		}
	})
}

func FuzzCallAndCtl(f *testing.F) {
	f.Add(AppendCall(nil, 1, 2, []byte("req")))
	f.Add(AppendReply(nil, StatusOK, []byte("reply")))
	f.Add(AppendReply(nil, Status(transport.CodeRemote), []byte("failed")))
	f.Add([]byte{byte(CtlJoin), '{', '}'})
	f.Fuzz(func(t *testing.T, p []byte) {
		if m, from, req, err := DecodeCall(p); err == nil {
			if re := AppendCall(nil, m, from, req); !bytes.Equal(re, p) {
				t.Fatalf("call re-encoded %x, want %x", re, p)
			}
		}
		if s, body, _, err := DecodeReply(p); err == nil && s == StatusOK {
			if re := AppendReply(nil, s, body); !bytes.Equal(re, p) {
				t.Fatalf("reply re-encoded %x, want %x", re, p)
			}
		}
		if _, body, err := DecodeCtl(p); err == nil {
			var v struct {
				Compute uint16
				Addr    string
				Members []struct{ ID uint16 }
			}
			_ = DecodeJSON(body, &v)
		}
	})
}

// FuzzDecodeAttach: an Attach payload decodes to a nonzero client or fails, and re-encodes to
// itself.
func FuzzDecodeAttach(f *testing.F) {
	f.Add(AppendAttach(nil, 3, 42)[HeaderSize:])
	f.Add([]byte{0, 0})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, p []byte) {
		c, err := DecodeAttach(p)
		if err != nil {
			return
		}
		if c == 0 {
			t.Fatal("client 0 decoded")
		}
		b := AppendAttach(nil, 9, c)
		h, err := ParseHeader(b, MinMaxFrame)
		if err != nil || h.Type != TypeAttach || ChannelOf(h.ID) != 9 || !bytes.Equal(b[HeaderSize:], p) {
			t.Fatalf("re-encoded %x (%v, %v), want payload %x", b, h, err, p)
		}
	})
}
