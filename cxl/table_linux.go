package cxl

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/farmem/farmem/farmem"
)

// The compute-id table has one 64-byte entry per compute id. An entry's lease word is the only
// word claimed with CAS; the rest describe the process that holds the id.
const (
	entLease = 0  // u64: gen<<40 | expiry
	entIdent = 8  // u64: gen<<32 | pid, written after the claim
	entStart = 16 // u64: the holder's start time (/proc/<pid>/stat field 22)
	entHost  = 24 // u64: the holder's host identity (boot id and pid namespace)
	entSince = 32 // u64: Unix ms of the claim (for Status)
)

// A lease word holds a 24-bit generation (bumped at every claim, so a stale holder can tell it
// lost the id) and a 40-bit expiry in milliseconds since the region's epoch, plus relBase.
// Expiry 0 is a free id and 1 a crashed (or fenced) one.
const (
	genBits    = 24
	genMask    = 1<<genBits - 1
	expBits    = 40
	expMask    = 1<<expBits - 1
	expFree    = 0
	expCrashed = 1
	relBase    = 16
)

func leaseGen(w uint64) uint32 { return uint32(w >> expBits) }
func leaseExp(w uint64) uint64 { return w & expMask }

// identity is what lets a process on the same host tell whether an id's holder is alive
// without waiting for its lease: its pid and start time, under one boot and pid namespace.
type identity struct {
	pid   int
	start uint64
	host  uint64 // 0: unknown, and then only leases count
}

func selfIdentity() identity {
	id := identity{pid: os.Getpid(), host: hostID()}
	if _, start, err := procState(id.pid); err == nil {
		id.start = start
	} else {
		id.host = 0
	}
	return id
}

// hostID hashes the boot id and the pid namespace: two processes with the same hostID see each
// other's pids.
func hostID() uint64 {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return 0
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return 0
	}
	h := fnv.New64a()
	h.Write(bytes.TrimSpace(boot))
	h.Write([]byte(ns))
	return h.Sum64() | 1
}

// procState returns a process's state letter and start time from /proc/<pid>/stat.
func procState(pid int) (state byte, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// "pid (comm) S ppid ...": comm may hold spaces and parentheses; the last ')' ends it.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("cxl: malformed /proc/%d/stat", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return 0, 0, fmt.Errorf("cxl: malformed /proc/%d/stat", pid)
	}
	start, err = strconv.ParseUint(string(f[19]), 10, 64) // field 22, starttime
	if err != nil {
		return 0, 0, fmt.Errorf("cxl: malformed /proc/%d/stat: %w", pid, err)
	}
	return f[0][0], start, nil
}

func (s *seg) word(off uintptr) *uint64 { return (*uint64)(unsafe.Add(s.entry, off)) }
func (s *seg) lease() *uint64           { return s.word(entLease) }

// nowRel is the current time in lease units.
func (m *mapping) nowRel() uint64 {
	d := time.Now().UnixMilli() - m.h.EpochMs
	if d < 0 {
		d = 0
	}
	return uint64(d) + relBase
}

// leaseLive is the fast liveness check of verbs: compute node s holds an unexpired lease.
func (m *mapping) leaseLive(s *seg) bool {
	exp := leaseExp(atomic.LoadUint64(s.lease()))
	return exp > expCrashed && exp > m.nowRel()
}

// liveGen returns the generation of compute node s if its lease is current.
func (m *mapping) liveGen(s *seg) (uint32, bool) {
	w := atomic.LoadUint64(s.lease())
	exp := leaseExp(w)
	return leaseGen(w), exp > expCrashed && exp > m.nowRel()
}

// live is the full liveness check: generation gen of compute node c holds an unexpired lease
// and, if its holder runs under this host's kernel, the holder is alive. A holder found dead
// is fenced (its lease marked crashed), so that every process sees it down at once.
func (m *mapping) live(c farmem.ComputeID, gen uint32) bool {
	if c == 0 || int(c) >= len(m.comp) {
		return false
	}
	s := &m.comp[c]
	w := atomic.LoadUint64(s.lease())
	if leaseGen(w) != gen || leaseExp(w) <= expCrashed {
		return false
	}
	if leaseExp(w) <= m.nowRel() || m.holderDead(s, gen) {
		atomic.CompareAndSwapUint64(s.lease(), w, w&^expMask|expCrashed)
		return false
	}
	return true
}

// holderDead reports whether generation gen of s is held by a process on this host that has
// exited (or is a zombie, or whose pid now names another process). It reports false when it
// cannot tell.
func (m *mapping) holderDead(s *seg, gen uint32) bool {
	if m.self.host == 0 {
		return false
	}
	ident := atomic.LoadUint64(s.word(entIdent))
	if uint32(ident>>32) != gen&genMask {
		return false // the holder has not written its identity yet
	}
	host, start := atomic.LoadUint64(s.word(entHost)), atomic.LoadUint64(s.word(entStart))
	if atomic.LoadUint64(s.word(entIdent)) != ident || host != m.self.host {
		return false
	}
	pid := int(uint32(ident))
	if pid == m.self.pid {
		return false
	}
	state, st, err := procState(pid)
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	return state == 'Z' || state == 'X' || st != start
}

// claim takes the lowest compute id that is free, crashed, expired, or held by a dead process
// on this host, with a CAS on its lease word, and returns it with its new generation.
func (m *mapping) claim() (farmem.ComputeID, uint32, error) {
	now := m.nowRel()
	for c := 1; c < len(m.comp); c++ {
		s := &m.comp[c]
		for {
			w := atomic.LoadUint64(s.lease())
			exp, g := leaseExp(w), leaseGen(w)
			if exp > expCrashed && exp > now && !m.holderDead(s, g) {
				break // held
			}
			ng := (g + 1) & genMask
			if ng == 0 {
				ng = 1
			}
			if atomic.CompareAndSwapUint64(s.lease(), w, uint64(ng)<<expBits|(now+m.leaseMs)) {
				return farmem.ComputeID(c), ng, nil
			}
		}
	}
	return 0, 0, fmt.Errorf("cxl: all %d compute ids of %s are held: %w", len(m.comp)-1, m.path, farmem.ErrNoSpace)
}

// writeIdent records this process as the holder of generation gen of s.
func (m *mapping) writeIdent(s *seg, gen uint32) {
	atomic.StoreUint64(s.word(entStart), m.self.start)
	atomic.StoreUint64(s.word(entHost), m.self.host)
	atomic.StoreUint64(s.word(entSince), uint64(time.Now().UnixMilli()))
	atomic.StoreUint64(s.word(entIdent), uint64(gen)<<32|uint64(uint32(m.self.pid)))
}

// renew extends generation gen's lease. It fails if the id was fenced or taken over: the holder
// must then stop acting as that compute node.
func (m *mapping) renew(s *seg, gen uint32) bool {
	for range 3 {
		w := atomic.LoadUint64(s.lease())
		if leaseGen(w) != gen || leaseExp(w) <= expCrashed {
			return false
		}
		if atomic.CompareAndSwapUint64(s.lease(), w, uint64(gen)<<expBits|(m.nowRel()+m.leaseMs)) {
			return true
		}
	}
	return false
}

// setLease ends generation gen's lease with expiry exp (expFree on Close, expCrashed on a
// crash), unless the id is no longer gen's.
func (m *mapping) setLease(s *seg, gen uint32, exp uint64) {
	for {
		w := atomic.LoadUint64(s.lease())
		if leaseGen(w) != gen || leaseExp(w) <= expCrashed {
			return
		}
		if atomic.CompareAndSwapUint64(s.lease(), w, uint64(gen)<<expBits|exp) {
			return
		}
	}
}
