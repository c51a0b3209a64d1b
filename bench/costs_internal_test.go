package bench

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
)

// fillStats sets every counter of s, however many farmem.Stats has, to a random value.
func fillStats(r *rand.Rand, s *farmem.Stats) {
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Uint64:
			v.SetUint(r.Uint64() >> 1)
		case reflect.Array:
			for i := range v.Len() {
				fill(v.Index(i))
			}
		case reflect.Struct:
			for i := range v.NumField() {
				fill(v.Field(i))
			}
		default:
			panic("farmem.Stats has a field of kind " + v.Kind().String() + ": teach addDelta and this test")
		}
	}
	fill(reflect.ValueOf(s).Elem())
}

// addDelta is farmem.Stats.Add of farmem.Stats.Sub on every counter (a counter added to
// farmem.Stats and not to addDelta makes this fail).
func TestAddDeltaIsAddOfSub(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 100 {
		var acc, before, after farmem.Stats
		fillStats(r, &acc)
		fillStats(r, &before)
		fillStats(r, &after)
		want := acc.Add(after.Sub(before))
		addDelta(&acc, &after, &before)
		require.Equal(t, want, acc)
	}
}
