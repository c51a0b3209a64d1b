package far_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/farmem/farmem/far"
)

// pointCodec is a hand-written codec for Point, with DecodeInto: what a program writes for a
// hot type, so that a typed load costs the Read and this decode, written straight into the
// caller's variable.
type pointCodec struct{}

func (pointCodec) Size() int { return 24 }

func (pointCodec) Encode(b []byte, p Point) {
	binary.LittleEndian.PutUint64(b[0:], math.Float64bits(p.X))
	binary.LittleEndian.PutUint64(b[8:], math.Float64bits(p.Y))
	binary.LittleEndian.PutUint64(b[16:], math.Float64bits(p.Z))
}

func (c pointCodec) Decode(b []byte) Point {
	var p Point
	c.DecodeInto(b, &p)
	return p
}

// DecodeInto sets the fields in place; it keeps nothing of p (far.DecoderInto's contract).
func (pointCodec) DecodeInto(b []byte, p *Point) {
	p.X = math.Float64frombits(binary.LittleEndian.Uint64(b[0:]))
	p.Y = math.Float64frombits(binary.LittleEndian.Uint64(b[8:]))
	p.Z = math.Float64frombits(binary.LittleEndian.Uint64(b[16:]))
}

// A codec with DecodeInto: LoadInto decodes into the caller's variable, which stays on its
// stack, so the load allocates nothing and copies the value once, from the Read's buffer.
func ExampleDecoderInto() {
	c, done := exampleClient()
	defer done()
	ctx := context.Background()
	p, err := far.NewPtr(ctx, c, Point{1, 2, 3}, far.PtrOptions[Point]{Mode: far.SingleWriter, Codec: pointCodec{}})
	if err != nil {
		panic(err)
	}
	var v Point
	err = p.LoadInto(ctx, c, &v)
	_, in := p.Codec().(far.DecoderInto[Point])
	fmt.Println(v, err, in)
	// Output: {1 2 3} <nil> true
}
