package farmemtest

import "github.com/farmem/farmem/farmem"

// Within runs body inside the fabric: inside the simulation when f is a simulator (a fabric
// with a Run(func()) method that runs a function as one of its simulated goroutines, as
// sim.Sim does), and directly on every other transport. Tests that run a structure on several
// transports set up and check their state with it.
func Within(f farmem.Fabric, body func()) {
	if s, ok := f.(interface{ Run(func()) }); ok {
		s.Run(body)
		return
	}
	body()
}
