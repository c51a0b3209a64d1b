package wire

import (
	"errors"
	"io"
)

// ReadFrame reads one frame from r: the header into hdr, then the payload into buf if it fits
// there, or into a new slice if not. It returns the header and the payload. An error reading
// the payload after a good header is io.ErrUnexpectedEOF rather than io.EOF.
func ReadFrame(r io.Reader, hdr *[HeaderSize]byte, buf []byte, maxFrame uint32) (Header, []byte, error) {
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return Header{}, nil, err
	}
	h, err := ParseHeader(hdr[:], maxFrame)
	if err != nil {
		return Header{}, nil, err
	}
	var p []byte
	if int(h.Len) <= cap(buf) {
		p = buf[:h.Len]
	} else {
		p = make([]byte, h.Len)
	}
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Header{}, nil, err
	}
	return h, p, nil
}
