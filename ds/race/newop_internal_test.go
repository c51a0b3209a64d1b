package race

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNewOpResets: newOp, which resets the scratch operation field by field, leaves no field of
// the previous operation behind: with every field of the scratch set to a nonzero value, it
// gives what a zero opState with the same known and meta storage gives.
func TestNewOpResets(t *testing.T) {
	tab, _ := localTable(t, Params{Groups: 8})
	key := []byte("the key")
	op := &tab.scr.op
	v := reflect.ValueOf(op).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		f = reflect.NewAt(f.Type(), f.Addr().UnsafePointer()).Elem() // unexported fields
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(7)
		case reflect.Int64:
			f.SetInt(7)
		case reflect.Slice:
			f.Set(reflect.MakeSlice(f.Type(), 1, 1))
		case reflect.Struct:
			require.Equal(t, "keyHash", f.Type().Name(), "a struct field newOp may not reset: %s", v.Type().Field(i).Name)
			f.Set(reflect.ValueOf(keyHash{h1: 7, h2: 7}))
		case reflect.Array:
			for j := range f.Len() {
				f.Index(j).SetUint(7)
			}
		default:
			t.Fatalf("field %s of kind %v: extend this test", v.Type().Field(i).Name, f.Kind())
		}
	}
	known, meta := op.known, op.meta
	got := tab.newOp(key)
	want := opState{known: known[:0], meta: meta[:0]}
	tab.initOp(&want, key)
	require.Equal(t, want, *got)
}
