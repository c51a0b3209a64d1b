package sim

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/farmem/farmem/farmem"
)

// clock is a client's clock (Model.ClockOffset, Model.ClockDrift): it reads true virtual time
// t as t + off + (t-Epoch)*ppm/1e6. The zero clock is the true one.
type clock struct {
	off int64
	ppm float64
}

// clockFor returns the clock of client id: drawn from the seed and the id alone, from a source
// of its own, so that it depends on nothing else in the run and takes nothing from the other
// sources.
func (s *Sim) clockFor(id farmem.ClientID) clock {
	if s.m.ClockOffset == 0 && s.m.ClockDrift == 0 {
		return clock{}
	}
	r := rand.New(rand.NewPCG(s.seed^0x243f6a8885a308d3, uint64(id)*0x9e3779b97f4a7c15+1))
	var k clock
	if o := int64(s.m.ClockOffset); o > 0 {
		k.off = r.Int64N(2*o+1) - o
	}
	if d := s.m.ClockDrift; d > 0 {
		k.ppm = (2*r.Float64() - 1) * d
	}
	return k
}

// local returns the clock's reading at true virtual time t.
func (k clock) local(t int64) int64 {
	if k.ppm == 0 {
		return t + k.off
	}
	return t + k.off + int64(math.Floor(float64(t-int64(Epoch))*k.ppm/1e6))
}

// span returns the true time during which the clock advances by d (d >= 0), rounded up.
func (k clock) span(d time.Duration) int64 {
	if k.ppm == 0 || d <= 0 {
		return int64(d)
	}
	return int64(math.Ceil(float64(d) * 1e6 / (1e6 + k.ppm)))
}

// ClockOf returns how client id's clock differs from true virtual time: its offset at Epoch
// and its drift in parts per million (both zero unless Model.ClockOffset or Model.ClockDrift
// is set). It is a pure function of the model, the seed and the id.
func (s *Sim) ClockOf(id farmem.ClientID) (offset time.Duration, driftPPM float64) {
	k := s.clockFor(id)
	return time.Duration(k.off), k.ppm
}
