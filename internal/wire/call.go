package wire

import (
	"encoding/json"

	"github.com/farmem/farmem/farmem"
)

// Call payload:      method u16 | from u16 | request bytes (at most farmem.MaxCallBytes)
// Msg payload:       the same as a Call's (AppendCall, DecodeCall)
// CallReply payload: status u8 | the reply if the status is OK, else a UTF-8 message
// Ctl payload:       op u8 | a JSON body
// CtlReply payload:  status u8 | a JSON body if the status is OK, else a UTF-8 message

// AppendCall appends a Call payload.
func AppendCall(b []byte, method uint16, from farmem.ClientID, req []byte) []byte {
	b = appendU16(b, method)
	b = appendU16(b, uint16(from))
	return append(b, req...)
}

// DecodeCall decodes a Call payload; req aliases p.
func DecodeCall(p []byte) (method uint16, from farmem.ClientID, req []byte, err error) {
	r := reader{b: p}
	method = r.u16("method")
	from = farmem.ClientID(r.u16("from"))
	if r.err != nil {
		return 0, 0, nil, r.err
	}
	if len(r.b) > farmem.MaxCallBytes {
		return 0, 0, nil, malformed("call request of %d bytes", len(r.b))
	}
	return method, from, r.b, nil
}

// AppendReply appends a CallReply or CtlReply payload: status and body (the reply on success,
// the message otherwise).
func AppendReply(b []byte, s Status, body []byte) []byte {
	if s != StatusOK && len(body) > MaxMessage {
		body = AppendMessage(nil, 0, string(body))[1:]
	}
	return append(append(b, byte(s)), body...)
}

// DecodeReply decodes a CallReply or CtlReply payload. On success body aliases p; on failure msg
// is the sender's message.
func DecodeReply(p []byte) (s Status, body []byte, msg string, err error) {
	if len(p) == 0 {
		return 0, nil, "", malformed("empty reply")
	}
	s = Status(p[0])
	if !s.Valid() {
		return 0, nil, "", malformed("reply status %#x", p[0])
	}
	if s == StatusOK {
		if len(p)-1 > farmem.MaxCallBytes {
			return 0, nil, "", malformed("reply of %d bytes", len(p)-1)
		}
		return s, p[1:], "", nil
	}
	_, msg, err = DecodeMessage(p)
	return s, nil, msg, err
}

// CtlOp names a control-plane request.
type CtlOp uint8

// Control-plane requests. Providers add their own from CtlProvider up.
const (
	CtlInfo  CtlOp = 1 // the node's NodeStatus (health and counters)
	CtlJoin  CtlOp = 2 // claim a compute id with a lease (registry)
	CtlRenew CtlOp = 3 // renew a lease; the reply lists the members
	CtlLeave CtlOp = 4 // give a compute id back
	CtlList  CtlOp = 5 // the members
	CtlFault CtlOp = 6 // inject a fault (only on nodes started to allow it, for tests)

	// CtlProvider is the first op a data-path provider may define for its own setup (queue
	// pair exchange on ibverbs).
	CtlProvider CtlOp = 0x40
)

// AppendCtl appends a Ctl payload with body marshalled as JSON.
func AppendCtl(b []byte, op CtlOp, body any) ([]byte, error) {
	j, err := json.Marshal(body)
	if err != nil {
		return b, err
	}
	return append(append(b, byte(op)), j...), nil
}

// DecodeCtl decodes a Ctl payload's op; the body is the rest.
func DecodeCtl(p []byte) (CtlOp, []byte, error) {
	if len(p) == 0 {
		return 0, nil, malformed("empty control request")
	}
	return CtlOp(p[0]), p[1:], nil
}

// DecodeJSON decodes a control body into v; malformed JSON is ErrMalformed.
func DecodeJSON(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return malformed("control body: %v", err)
	}
	return nil
}
