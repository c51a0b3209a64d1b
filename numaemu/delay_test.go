package numaemu

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestProfiles(t *testing.T) {
	prev := time.Duration(0)
	for _, p := range Profiles() {
		require.Greater(t, p.Latency, prev, "profiles are fastest first")
		prev = p.Latency
		require.NotEmpty(t, p.Source)
		got, err := ProfileByName(p.Name)
		require.NoError(t, err)
		require.Equal(t, p, got)
	}
	require.Equal(t, time.Duration(0), LocalDRAM.Added())
	require.Equal(t, 69*time.Nanosecond, CXLDirect.Added())
	require.Equal(t, 169*time.Nanosecond, CXLSwitched.Added())
	require.Equal(t, 1819*time.Nanosecond, RDMA.Added())
	require.Equal(t, time.Duration(0), Profile{Latency: time.Nanosecond}.Added(), "never negative")
	_, err := ProfileByName("optane")
	require.Error(t, err)
}

// accurate reports whether in meets target within tol (a fraction) in the best of a few
// attempts (the machine is shared: one attempt may be preempted).
func accurate(in *Injector, target time.Duration, tol float64) (Accuracy, bool) {
	var a Accuracy
	for range 5 {
		a = in.Measure(target, 2000)
		if a.ErrorPct >= -tol*100 && a.ErrorPct <= tol*100 {
			return a, true
		}
	}
	return a, false
}

func TestInjectorAccuracy(t *testing.T) {
	in := Default()
	t.Logf("calibration: %+v", in.Calibration())
	require.Greater(t, in.Calibration().NsPerIter, 0.0)
	for _, p := range Profiles()[1:] {
		a, ok := accurate(in, p.Added(), 0.25)
		t.Logf("%-13s %v", p.Name, a)
		require.True(t, ok, "%s: %v", p.Name, a)
	}
	z := in.Measure(0, 1000)
	require.Less(t, z.Mean, 50*time.Nanosecond, "a zero delay costs next to nothing")
}

// A deliberately mis-calibrated injector (believing the loop twice as slow as it is) is caught.
func TestInjectorMiscalibrationDetected(t *testing.T) {
	bad := *Default()
	bad.nsPerIter *= 2
	a, ok := accurate(&bad, CXLSwitched.Added(), 0.25)
	require.False(t, ok, "a delay half as long must fail the check: %v", a)
	require.Less(t, a.ErrorPct, -25.0)
}
