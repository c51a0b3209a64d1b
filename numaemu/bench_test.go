package numaemu

import "testing"

// BenchmarkInjector delays by each profile's added latency (what an emulated access injects)
// and reports the target next to the measured ns/op and the error in percent. LocalDRAM adds
// nothing, so its row is the cost of a zero delay.
func BenchmarkInjector(b *testing.B) {
	in := Default()
	for _, p := range Profiles() {
		target := p.Added()
		b.Run(p.Name, func(b *testing.B) {
			for b.Loop() {
				in.Delay(target)
			}
			got := float64(b.Elapsed()) / float64(b.N)
			b.ReportMetric(float64(target), "target-ns")
			if target > 0 {
				b.ReportMetric((got-float64(target))/float64(target)*100, "err-%")
			}
		})
	}
}

// BenchmarkInjectorFull delays by each profile's whole latency, for delays of every size.
func BenchmarkInjectorFull(b *testing.B) {
	in := Default()
	for _, p := range Profiles() {
		b.Run(p.Name, func(b *testing.B) {
			for b.Loop() {
				in.Delay(p.Latency)
			}
			got := float64(b.Elapsed()) / float64(b.N)
			b.ReportMetric(float64(p.Latency), "target-ns")
			b.ReportMetric((got-float64(p.Latency))/float64(p.Latency)*100, "err-%")
		})
	}
}
