//go:build !linux

package cxl

import (
	"context"
	"fmt"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/farmem/transport"
)

// errNotLinux: regions need Linux (memfd, futexes, mbind, /proc).
var errNotLinux = fmt.Errorf("cxl: mapped regions need Linux: %w", farmem.ErrNotSupported)

// Region is a handle on a region file. On this platform no region can be opened.
type Region struct{}

// Create returns an error wrapping farmem.ErrNotSupported on this platform.
func Create(string, Options) (*Region, error) { return nil, errNotLinux }

// CreateTemp returns an error wrapping farmem.ErrNotSupported on this platform.
func CreateTemp(string, string, Options) (*Region, error) { return nil, errNotLinux }

// OpenRegion returns an error wrapping farmem.ErrNotSupported on this platform.
func OpenRegion(string) (*Region, error) { return nil, errNotLinux }

// Open returns an error wrapping farmem.ErrNotSupported on this platform.
func Open(string, OpenOptions) (*Fabric, error) { return nil, errNotLinux }

// Path returns "".
func (r *Region) Path() string { return "" }

// Close does nothing.
func (r *Region) Close() error { return nil }

// Info returns the zero RegionInfo.
func (r *Region) Info() RegionInfo { return RegionInfo{} }

// Topology returns an empty topology.
func (r *Region) Topology() *farmem.Topology { return &farmem.Topology{} }

// Status returns an error wrapping farmem.ErrNotSupported.
func (r *Region) Status() (Status, error) { return Status{}, errNotLinux }

// Attach returns an error wrapping farmem.ErrNotSupported.
func (r *Region) Attach(OpenOptions) (*Fabric, error) { return nil, errNotLinux }

// Fabric is a compute node attached to a region. On this platform none can be.
type Fabric struct{}

var (
	_ farmem.Fabric           = (*Fabric)(nil)
	_ transport.FaultInjector = (*Fabric)(nil)
)

// ID returns 0.
func (f *Fabric) ID() farmem.NodeID { return 0 }

// Policy returns Coherent.
func (f *Fabric) Policy() Policy { return Coherent }

// Inject returns 0.
func (f *Fabric) Inject() time.Duration { return 0 }

// Topology returns an empty topology.
func (f *Fabric) Topology() *farmem.Topology { return &farmem.Topology{} }

// Hosted returns nil.
func (f *Fabric) Hosted() []farmem.NodeID { return nil }

// Open returns an error wrapping farmem.ErrNotSupported.
func (f *Fabric) Open(context.Context, farmem.NodeID) (farmem.Memory, error) { return nil, errNotLinux }

// Handle returns an error wrapping farmem.ErrNotSupported.
func (f *Fabric) Handle(farmem.NodeID, uint16, farmem.Handler) error { return errNotLinux }

// Runtime returns a wall-clock runtime.
func (f *Fabric) Runtime() farmem.Runtime { return transport.NewWallRuntime(1) }

// Stats returns zero.
func (f *Fabric) Stats() farmem.Stats { return farmem.Stats{} }

// Close does nothing.
func (f *Fabric) Close() error { return nil }

// Crash returns an error wrapping farmem.ErrNotSupported.
func (f *Fabric) Crash(farmem.NodeID) error { return errNotLinux }

// Hang returns an error wrapping farmem.ErrNotSupported.
func (f *Fabric) Hang(farmem.NodeID) error { return errNotLinux }

// Resume returns an error wrapping farmem.ErrNotSupported.
func (f *Fabric) Resume(farmem.NodeID) error { return errNotLinux }

// Partition returns an error wrapping farmem.ErrNotSupported.
func (f *Fabric) Partition(farmem.ClientID, farmem.NodeID) error { return errNotLinux }

// Heal returns an error wrapping farmem.ErrNotSupported.
func (f *Fabric) Heal(farmem.ClientID, farmem.NodeID) error { return errNotLinux }

// CrashAfter returns an error wrapping farmem.ErrNotSupported.
func (f *Fabric) CrashAfter(farmem.NodeID, int) error { return errNotLinux }

// CrashClient returns an error wrapping farmem.ErrNotSupported.
func (f *Fabric) CrashClient(farmem.ClientID) error { return errNotLinux }
