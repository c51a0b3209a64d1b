//go:build linux && cgo && rdma

// Package ibv is the device layer of the rdma package's ibverbs provider: verbs.Device over
// rdma-core's libibverbs, through cgo. It is thin on purpose: it opens a device port and its
// protection domain, registers mapped memory, creates RC queue pairs with their completion
// queues, moves them through INIT, RTR and RTS, and posts and polls in batches — one cgo call
// posts a whole chain of work requests (one ibv_post_send), one polls up to N completions.
// Everything else (fences, signaling, staging, completion matching, timeouts) is package
// verbs', in pure Go, tested there against a fake device.
//
// Work requests and completions cross into C as arrays of plain structs (verbs.WR, verbs.WC)
// holding no Go pointers; the C side builds its ibv_send_wr chain in memory it allocated with
// the queue pair. Registered memory is always mapped (mmap), never the Go heap.
//
// Atomics: verbs atomics act on the remote 8 bytes in the responder's byte order only when the
// NIC is configured so. mlx5 NICs support two requester modes for 8-byte atomics, big-endian
// and host-endian; the Linux mlx5 driver selects host-endian where supported and then reports
// IBV_ATOMIC_HCA, else IBV_ATOMIC_NONE. Open refuses a device reporting IBV_ATOMIC_NONE and a
// big-endian host, so remote words are little-endian host words, as farmem's contract says.
// IBV_ATOMIC_HCA means NIC atomics are atomic only with respect to other NIC atomics, not to
// the CPU's: a memory node must not also serve atomics through its CPU (the tcp provider) to
// the same words.
//
// Build it with -tags rdma on Linux with cgo and libibverbs-dev; other builds get the stub,
// which returns farmem.ErrNotSupported.
package ibv

/*
#cgo LDFLAGS: -libverbs
#include <infiniband/verbs.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Mirrors of verbs.WR and verbs.WC.
struct fm_wr {
	uint64_t id;
	uint32_t opcode;
	uint32_t flags;
	uint64_t laddr;
	uint32_t len;
	uint32_t lkey;
	uint64_t raddr;
	uint32_t rkey;
	uint32_t pad;
	uint64_t compare;
	uint64_t swap;
};

struct fm_wc {
	uint64_t id;
	uint32_t status;
	uint32_t vendor_err;
};

enum {
	FM_WR_SIZE = sizeof(struct fm_wr),
	FM_WR_OFF_LADDR = offsetof(struct fm_wr, laddr),
	FM_WR_OFF_RADDR = offsetof(struct fm_wr, raddr),
	FM_WR_OFF_COMPARE = offsetof(struct fm_wr, compare),
	FM_WC_SIZE = sizeof(struct fm_wc),
	FM_WC_OFF_STATUS = offsetof(struct fm_wc, status),
};

struct fm_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	int port;
	int gid_index; // -1: no GRH
	uint8_t gid[16];
	uint16_t lid;
	int mtu;
	int link_layer;
	int max_qp_wr;
	int max_qp_rd_atom;
	int max_qp_init_rd_atom;
	int atomic_cap;
	char name[64];
	char why[128];
};

struct fm_qp {
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	struct ibv_send_wr *wrs;
	struct ibv_sge *sges;
	struct ibv_wc *wcs;
	int depth;
	int npoll;
	int max_inline;
};

static int fm_count_devices(int *n) {
	errno = 0;
	struct ibv_device **list = ibv_get_device_list(n);
	if (!list) {
		return errno ? errno : ENODEV;
	}
	ibv_free_device_list(list);
	return 0;
}

static const char *fm_device_name(int i) {
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	static __thread char name[64];
	name[0] = 0;
	if (list && i < n) {
		snprintf(name, sizeof name, "%s", ibv_get_device_name(list[i]));
	}
	if (list) {
		ibv_free_device_list(list);
	}
	return name;
}

static int fm_pick_gid(struct fm_dev *d, int tbl_len) {
	int first = -1, v2 = -1;
	for (int i = 0; i < tbl_len; i++) {
		struct ibv_gid_entry e;
		if (ibv_query_gid_ex(d->ctx, d->port, i, &e, 0)) {
			continue;
		}
		const uint8_t *g = e.gid.raw;
		int zero = 1;
		for (int k = 0; k < 16; k++) {
			zero &= g[k] == 0;
		}
		if (zero) {
			continue;
		}
		if (first < 0) {
			first = i;
		}
		if (e.gid_type == IBV_GID_TYPE_ROCE_V2) {
			int mapped = g[10] == 0xff && g[11] == 0xff;
			for (int k = 0; k < 10; k++) {
				mapped &= g[k] == 0;
			}
			if (mapped) {
				return i;
			}
			if (v2 < 0) {
				v2 = i;
			}
		}
	}
	return v2 >= 0 ? v2 : first;
}

static int fm_open(const char *name, int port, int gid_index, struct fm_dev *d) {
	int n = 0, rc;
	errno = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list) {
		snprintf(d->why, sizeof d->why, "ibv_get_device_list");
		return errno ? errno : ENODEV;
	}
	struct ibv_device *dev = NULL;
	for (int i = 0; i < n; i++) {
		if (!name[0] || strcmp(ibv_get_device_name(list[i]), name) == 0) {
			dev = list[i];
			break;
		}
	}
	if (!dev) {
		ibv_free_device_list(list);
		snprintf(d->why, sizeof d->why, "no such device among %d", n);
		return ENODEV;
	}
	snprintf(d->name, sizeof d->name, "%s", ibv_get_device_name(dev));
	d->ctx = ibv_open_device(dev);
	ibv_free_device_list(list);
	if (!d->ctx) {
		snprintf(d->why, sizeof d->why, "ibv_open_device");
		return errno ? errno : EIO;
	}
	struct ibv_device_attr da;
	if ((rc = ibv_query_device(d->ctx, &da))) {
		snprintf(d->why, sizeof d->why, "ibv_query_device");
		goto fail;
	}
	struct ibv_port_attr pa;
	if ((rc = ibv_query_port(d->ctx, port, &pa))) {
		snprintf(d->why, sizeof d->why, "ibv_query_port %d", port);
		goto fail;
	}
	if (pa.state != IBV_PORT_ACTIVE) {
		snprintf(d->why, sizeof d->why, "port %d is not active (state %d)", port, pa.state);
		rc = ENETDOWN;
		goto fail;
	}
	d->port = port;
	d->lid = pa.lid;
	d->mtu = pa.active_mtu;
	d->link_layer = pa.link_layer;
	d->max_qp_wr = da.max_qp_wr;
	d->max_qp_rd_atom = da.max_qp_rd_atom;
	d->max_qp_init_rd_atom = da.max_qp_init_rd_atom;
	d->atomic_cap = da.atomic_cap;
	if (gid_index < 0 && pa.link_layer == IBV_LINK_LAYER_ETHERNET) {
		gid_index = fm_pick_gid(d, pa.gid_tbl_len);
		if (gid_index < 0) {
			snprintf(d->why, sizeof d->why, "port %d has no usable GID", port);
			rc = EADDRNOTAVAIL;
			goto fail;
		}
	}
	d->gid_index = gid_index;
	memset(d->gid, 0, sizeof d->gid);
	if (gid_index >= 0) {
		union ibv_gid g;
		if ((rc = ibv_query_gid(d->ctx, port, gid_index, &g))) {
			snprintf(d->why, sizeof d->why, "ibv_query_gid %d", gid_index);
			goto fail;
		}
		memcpy(d->gid, g.raw, 16);
	}
	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd) {
		snprintf(d->why, sizeof d->why, "ibv_alloc_pd");
		rc = errno ? errno : ENOMEM;
		goto fail;
	}
	return 0;
fail:
	ibv_close_device(d->ctx);
	d->ctx = NULL;
	return rc ? rc : EIO;
}

static void fm_close(struct fm_dev *d) {
	if (d->pd) {
		ibv_dealloc_pd(d->pd);
	}
	if (d->ctx) {
		ibv_close_device(d->ctx);
	}
	d->pd = NULL;
	d->ctx = NULL;
}

static struct ibv_mr *fm_reg(struct fm_dev *d, void *addr, size_t len, int remote, int *err) {
	int access = IBV_ACCESS_LOCAL_WRITE;
	if (remote) {
		access |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
	}
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(d->pd, addr, len, access);
	*err = mr ? 0 : (errno ? errno : ENOMEM);
	return mr;
}

static int fm_dereg(struct ibv_mr *mr) { return ibv_dereg_mr(mr); }

static uint32_t fm_mr_lkey(struct ibv_mr *mr) { return mr->lkey; }
static uint32_t fm_mr_rkey(struct ibv_mr *mr) { return mr->rkey; }

static void fm_destroy_qp(struct fm_qp *q) {
	if (q->qp) {
		ibv_destroy_qp(q->qp);
	}
	if (q->cq) {
		ibv_destroy_cq(q->cq);
	}
	free(q->wrs);
	free(q->sges);
	free(q->wcs);
	free(q);
}

static struct fm_qp *fm_create_qp(struct fm_dev *d, int depth, int max_inline, int npoll, int *err) {
	struct fm_qp *q = calloc(1, sizeof *q);
	if (!q) {
		*err = ENOMEM;
		return NULL;
	}
	q->depth = depth;
	q->npoll = npoll;
	q->wrs = calloc(depth, sizeof *q->wrs);
	q->sges = calloc(depth, sizeof *q->sges);
	q->wcs = calloc(npoll, sizeof *q->wcs);
	if (!q->wrs || !q->sges || !q->wcs) {
		*err = ENOMEM;
		fm_destroy_qp(q);
		return NULL;
	}
	errno = 0;
	q->cq = ibv_create_cq(d->ctx, depth, NULL, NULL, 0);
	if (!q->cq) {
		*err = errno ? errno : ENOMEM;
		fm_destroy_qp(q);
		return NULL;
	}
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof ia);
	ia.send_cq = q->cq;
	ia.recv_cq = q->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = 0;
	ia.cap.max_send_wr = depth;
	ia.cap.max_recv_wr = 1;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.cap.max_inline_data = max_inline;
	errno = 0;
	q->qp = ibv_create_qp(d->pd, &ia);
	if (!q->qp && max_inline > 0) {
		ia.cap.max_inline_data = 0;
		q->qp = ibv_create_qp(d->pd, &ia);
	}
	if (!q->qp) {
		*err = errno ? errno : ENOMEM;
		fm_destroy_qp(q);
		return NULL;
	}
	q->max_inline = ia.cap.max_inline_data;
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = d->port;
	a.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
	if ((*err = ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))) {
		fm_destroy_qp(q);
		return NULL;
	}
	*err = 0;
	return q;
}

static uint32_t fm_qpn(struct fm_qp *q) { return q->qp->qp_num; }
static int fm_max_inline(struct fm_qp *q) { return q->max_inline; }

static int fm_connect(struct fm_dev *d, struct fm_qp *q, uint32_t rqpn, uint32_t rpsn, uint16_t rlid,
		const uint8_t *rgid, int rmtu, uint32_t psn, uint8_t timeout, uint8_t retry) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = rmtu < d->mtu ? rmtu : d->mtu;
	a.dest_qp_num = rqpn;
	a.rq_psn = rpsn;
	a.max_dest_rd_atomic = d->max_qp_rd_atom;
	a.min_rnr_timer = 12;
	a.ah_attr.dlid = rlid;
	a.ah_attr.sl = 0;
	a.ah_attr.src_path_bits = 0;
	a.ah_attr.port_num = d->port;
	if (d->gid_index >= 0) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, rgid, 16);
		a.ah_attr.grh.sgid_index = d->gid_index;
		a.ah_attr.grh.hop_limit = 64;
	}
	int rc = ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (rc) {
		return rc;
	}
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = timeout;
	a.retry_cnt = retry;
	a.rnr_retry = 7;
	a.sq_psn = psn;
	a.max_rd_atomic = d->max_qp_init_rd_atom;
	return ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
		IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static int fm_break(struct fm_qp *q) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_ERR;
	return ibv_modify_qp(q->qp, &a, IBV_QP_STATE);
}

// fm_post builds the chain of n work requests in the queue pair's own memory and posts it with
// one ibv_post_send: one doorbell.
static int fm_post(struct fm_qp *q, const struct fm_wr *in, int n, int *posted) {
	*posted = 0;
	if (n <= 0) {
		return 0;
	}
	if (n > q->depth) {
		return EINVAL;
	}
	for (int i = 0; i < n; i++) {
		struct ibv_send_wr *w = &q->wrs[i];
		struct ibv_sge *s = &q->sges[i];
		memset(w, 0, sizeof *w);
		w->wr_id = in[i].id;
		w->next = i + 1 < n ? &q->wrs[i + 1] : NULL;
		if (in[i].len > 0) {
			s->addr = in[i].laddr;
			s->length = in[i].len;
			s->lkey = in[i].lkey;
			w->sg_list = s;
			w->num_sge = 1;
		}
		unsigned int fl = 0;
		if (in[i].flags & 1) fl |= IBV_SEND_SIGNALED;
		if (in[i].flags & 2) fl |= IBV_SEND_FENCE;
		if (in[i].flags & 4) fl |= IBV_SEND_INLINE;
		w->send_flags = fl;
		switch (in[i].opcode) {
		case 1:
		case 2:
			w->opcode = in[i].opcode == 1 ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
			w->wr.rdma.remote_addr = in[i].raddr;
			w->wr.rdma.rkey = in[i].rkey;
			break;
		case 3:
		case 4:
			w->opcode = in[i].opcode == 3 ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD;
			w->wr.atomic.remote_addr = in[i].raddr;
			w->wr.atomic.rkey = in[i].rkey;
			w->wr.atomic.compare_add = in[i].compare;
			w->wr.atomic.swap = in[i].swap;
			break;
		default:
			return EINVAL;
		}
	}
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(q->qp, &q->wrs[0], &bad);
	*posted = rc == 0 ? n : (bad ? (int)(bad - q->wrs) : 0);
	return rc;
}

// fm_poll moves up to n completions into out with one ibv_poll_cq.
static int fm_poll(struct fm_qp *q, struct fm_wc *out, int n) {
	if (n > q->npoll) {
		n = q->npoll;
	}
	int k = ibv_poll_cq(q->cq, n, q->wcs);
	for (int i = 0; i < k; i++) {
		out[i].id = q->wcs[i].wr_id;
		out[i].status = q->wcs[i].status;
		out[i].vendor_err = q->wcs[i].vendor_err;
	}
	return k;
}
*/
import "C"

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/rdma/internal/verbs"
)

// Available reports that this build has the device layer.
const Available = true

// pollBatch is the most completions one poll call moves.
const pollBatch = 64

// maxInline is the inline data asked of each queue pair (the device may grant less).
const maxInline = 64

// checkABI reports whether the C mirrors of verbs.WR and verbs.WC have their layout, and
// whether the status values are ibv_wc_status's.
func checkABI() error {
	var w verbs.WR
	var c verbs.WC
	type pair struct{ goV, cV uintptr }
	for _, p := range []pair{
		{unsafe.Sizeof(w), C.FM_WR_SIZE}, {unsafe.Offsetof(w.LAddr), C.FM_WR_OFF_LADDR},
		{unsafe.Offsetof(w.RAddr), C.FM_WR_OFF_RADDR}, {unsafe.Offsetof(w.Compare), C.FM_WR_OFF_COMPARE},
		{unsafe.Sizeof(c), C.FM_WC_SIZE}, {unsafe.Offsetof(c.Status), C.FM_WC_OFF_STATUS},
		{uintptr(verbs.StatusWRFlushErr), C.IBV_WC_WR_FLUSH_ERR}, {uintptr(verbs.StatusRemAccessErr), C.IBV_WC_REM_ACCESS_ERR},
		{uintptr(verbs.StatusRetryExcErr), C.IBV_WC_RETRY_EXC_ERR}, {uintptr(verbs.StatusGeneralErr), C.IBV_WC_GENERAL_ERR},
		{uintptr(verbs.StatusRemInvReqErr), C.IBV_WC_REM_INV_REQ_ERR}, {uintptr(verbs.StatusLocProtErr), C.IBV_WC_LOC_PROT_ERR},
	} {
		if p.goV != p.cV {
			return fmt.Errorf("ibv: the Go and C layouts of work requests disagree (%d vs %d): %w", p.goV, p.cV, farmem.ErrNotSupported)
		}
	}
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return fmt.Errorf("ibv: a big-endian host: verbs atomics act on host-order words, farmem's are little-endian: %w", farmem.ErrNotSupported)
	}
	return nil
}

// Devices lists the RDMA devices present. It fails if the system has no RDMA support.
func Devices() ([]string, error) {
	var n C.int
	if rc := C.fm_count_devices(&n); rc != 0 {
		return nil, fmt.Errorf("ibv: ibv_get_device_list: %w", syscall.Errno(rc))
	}
	names := make([]string, 0, int(n))
	for i := range int(n) {
		names = append(names, C.GoString(C.fm_device_name(C.int(i))))
	}
	return names, nil
}

// device is an open device port with its protection domain.
type device struct {
	d    *C.struct_fm_dev
	attr verbs.Attr

	mu     sync.Mutex
	closed bool
}

var _ verbs.Device = (*device)(nil)

// Open opens the device port spec names (see verbs.ParseDeviceSpec).
func Open(spec string) (verbs.Device, error) {
	if err := checkABI(); err != nil {
		return nil, err
	}
	ds, err := verbs.ParseDeviceSpec(spec)
	if err != nil {
		return nil, err
	}
	cd := (*C.struct_fm_dev)(C.calloc(1, C.sizeof_struct_fm_dev))
	if cd == nil {
		return nil, fmt.Errorf("ibv: %w", syscall.ENOMEM)
	}
	name := C.CString(ds.Name)
	defer C.free(unsafe.Pointer(name))
	if rc := C.fm_open(name, C.int(ds.Port), C.int(ds.GIDIndex), cd); rc != 0 {
		why := C.GoString(&cd.why[0])
		C.free(unsafe.Pointer(cd))
		return nil, fmt.Errorf("ibv: open device %q port %d: %s: %w: %w", ds.Name, ds.Port, why, syscall.Errno(rc), farmem.ErrNotSupported)
	}
	d := &device{d: cd, attr: verbs.Attr{Name: C.GoString(&cd.name[0]), MaxQPWR: int(cd.max_qp_wr),
		MaxInline: maxInline, MaxRdAtomic: int(cd.max_qp_rd_atom), Atomics: cd.atomic_cap != C.IBV_ATOMIC_NONE}}
	if !d.attr.Atomics {
		_ = d.Close()
		return nil, fmt.Errorf("ibv: device %s does no remote atomics (IBV_ATOMIC_NONE; on mlx5: no host-endian atomic mode): %w", d.attr.Name, farmem.ErrNotSupported)
	}
	return d, nil
}

// Attr implements verbs.Device.
func (d *device) Attr() verbs.Attr { return d.attr }

// Close implements verbs.Device.
func (d *device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	C.fm_close(d.d)
	C.free(unsafe.Pointer(d.d))
	return nil
}

// Alloc implements verbs.Device: anonymous mapped memory, registered for local writes.
func (d *device) Alloc(n int) (*verbs.Region, error) {
	page := os.Getpagesize()
	size := (n + page - 1) &^ (page - 1)
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("ibv: map %d staging bytes: %w", size, err)
	}
	r, err := d.register(b, false)
	if err != nil {
		_ = unix.Munmap(b)
		return nil, err
	}
	dereg := r.Release
	r.Release = func() error {
		err := dereg()
		if e := unix.Munmap(b); err == nil {
			err = e
		}
		return err
	}
	r.Bytes = b[:n]
	return r, nil
}

// Register implements verbs.Device: mem must be mapped memory.
func (d *device) Register(mem []byte) (*verbs.Region, error) {
	if len(mem) == 0 {
		return nil, fmt.Errorf("ibv: register an empty region: %w", farmem.ErrInvalid)
	}
	return d.register(mem, true)
}

func (d *device) register(mem []byte, remote bool) (*verbs.Region, error) {
	var rc C.int
	rem := C.int(0)
	if remote {
		rem = 1
	}
	p := unsafe.Pointer(&mem[0])
	mr := C.fm_reg(d.d, p, C.size_t(len(mem)), rem, &rc)
	if mr == nil {
		return nil, fmt.Errorf("ibv: ibv_reg_mr of %d bytes: %w", len(mem), syscall.Errno(rc))
	}
	var once sync.Once
	var derr error
	return &verbs.Region{Bytes: mem, Addr: uint64(uintptr(p)), LKey: uint32(C.fm_mr_lkey(mr)), RKey: uint32(C.fm_mr_rkey(mr)),
		Release: func() error {
			once.Do(func() {
				if rc := C.fm_dereg(mr); rc != 0 {
					derr = fmt.Errorf("ibv: ibv_dereg_mr: %w", syscall.Errno(rc))
				}
			})
			return derr
		}}, nil
}

// CreateQP implements verbs.Device.
func (d *device) CreateQP(cfg verbs.QPConfig) (verbs.DevQP, error) {
	if cfg.Depth <= 0 || cfg.Depth > d.attr.MaxQPWR {
		return nil, fmt.Errorf("ibv: queue pair of depth %d (device max %d): %w", cfg.Depth, d.attr.MaxQPWR, farmem.ErrInvalid)
	}
	var rc C.int
	q := C.fm_create_qp(d.d, C.int(cfg.Depth), C.int(min(cfg.MaxInline, maxInline)), C.int(pollBatch), &rc)
	if q == nil {
		return nil, fmt.Errorf("ibv: create a queue pair of depth %d: %w", cfg.Depth, syscall.Errno(rc))
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	psn := binary.LittleEndian.Uint32(b[:]) & 0xffffff
	to, retry := verbs.RetryParams(cfg.Timeout)
	qp := &devQP{d: d, q: q, timeout: to, retry: retry,
		ep: verbs.Endpoint{QPN: uint32(C.fm_qpn(q)), PSN: psn, LID: uint16(d.d.lid), MTU: int(d.d.mtu)}}
	for i := range 16 {
		qp.ep.GID[i] = byte(d.d.gid[i])
	}
	return qp, nil
}

// devQP is an RC queue pair with its completion queue.
type devQP struct {
	d       *device
	q       *C.struct_fm_qp
	ep      verbs.Endpoint
	timeout uint8
	retry   uint8

	mu     sync.Mutex
	closed bool
}

var _ verbs.DevQP = (*devQP)(nil)

func (q *devQP) Endpoint() verbs.Endpoint { return q.ep }

func (q *devQP) MaxInline() int { return int(C.fm_max_inline(q.q)) }

// Connect implements verbs.DevQP: INIT to RTR to RTS.
func (q *devQP) Connect(r verbs.Endpoint) error {
	if r.MTU < 1 || r.MTU > 5 {
		return fmt.Errorf("ibv: peer MTU %d: %w", r.MTU, farmem.ErrInvalid)
	}
	gid := C.CBytes(r.GID[:])
	defer C.free(gid)
	if rc := C.fm_connect(q.d.d, q.q, C.uint32_t(r.QPN), C.uint32_t(r.PSN), C.uint16_t(r.LID), (*C.uint8_t)(gid),
		C.int(r.MTU), C.uint32_t(q.ep.PSN), C.uint8_t(q.timeout), C.uint8_t(q.retry)); rc != 0 {
		return fmt.Errorf("ibv: connect queue pair %d to %d: %w", q.ep.QPN, r.QPN, syscall.Errno(rc))
	}
	return nil
}

// Post implements verbs.DevQP: one cgo call, one ibv_post_send.
func (q *devQP) Post(wrs []verbs.WR) (int, error) {
	if len(wrs) == 0 {
		return 0, nil
	}
	var posted C.int
	if rc := C.fm_post(q.q, (*C.struct_fm_wr)(unsafe.Pointer(&wrs[0])), C.int(len(wrs)), &posted); rc != 0 {
		return int(posted), fmt.Errorf("ibv: ibv_post_send: %w", syscall.Errno(rc))
	}
	return len(wrs), nil
}

// Poll implements verbs.DevQP: one cgo call, one ibv_poll_cq.
func (q *devQP) Poll(wcs []verbs.WC) (int, error) {
	if len(wcs) == 0 {
		return 0, nil
	}
	n := C.fm_poll(q.q, (*C.struct_fm_wc)(unsafe.Pointer(&wcs[0])), C.int(len(wcs)))
	if n < 0 {
		return 0, fmt.Errorf("ibv: ibv_poll_cq failed (%d)", int(n))
	}
	return int(n), nil
}

// Break implements verbs.DevQP.
func (q *devQP) Break() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	if rc := C.fm_break(q.q); rc != 0 {
		return fmt.Errorf("ibv: move queue pair %d to the error state: %w", q.ep.QPN, syscall.Errno(rc))
	}
	return nil
}

// Close implements verbs.DevQP.
func (q *devQP) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	C.fm_destroy_qp(q.q)
	return nil
}
