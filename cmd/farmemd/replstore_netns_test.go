package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/farmem/farmem/farmem"
	"github.com/farmem/farmem/rdma"
)

// netnsSandbox is set in the environment of the test binary this test re-runs in a network
// namespace of its own.
const netnsSandbox = "FARMEMD_TEST_NETNS"

// TestReplicatedStorePartitionNetns is TestReplicatedStorePartition with the partition made by
// the network: memory node 3 is a farmemd process in a network namespace of its own, reached by
// process A over one veth pair and by process B over another, and cutting node 3 off from A
// takes A's link down inside the namespace (every packet of A's to it, control connections
// included, is dropped in silence) until it is brought up again. Nodes 1 and 2 are in-process
// on loopback (node 2 is cut off from both with the fabric's fault for the stale-read check).
//
// So that nothing of the machine's own network changes, the test runs again in a new network
// namespace (unshare -n), which holds the veth pairs' other ends and both processes. It needs
// the privilege to create network namespaces (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2's
// ip; without them it is skipped, saying why.
func TestReplicatedStorePartitionNetns(t *testing.T) {
	partitionNetns(t, "TestReplicatedStorePartitionNetns", 5800*time.Millisecond, replicatedKinds(), replicatedPartition)
}

// partitionNetns runs scenario, for each of kinds, on the network-namespace partition cluster
// TestReplicatedStorePartitionNetns describes, re-running the test binary (only the test
// named name) in a new network namespace; it skips, saying why, without the privilege.
func partitionNetns(t *testing.T, name string, est time.Duration, kinds []storeKind, scenario func(*testing.T, *partitionCluster)) {
	if os.Getenv(netnsSandbox) == "" {
		parallel(t, est, false) // mostly waiting out down timeouts
		if _, err := exec.LookPath("ip"); err != nil {
			t.Skipf("needs iproute2's ip to make veth pairs: %v", err)
		}
		if out, err := exec.Command("unshare", "-n", "true").CombinedOutput(); err != nil {
			t.Skipf("needs the privilege to create network namespaces (CAP_SYS_ADMIN, CAP_NET_ADMIN): unshare -n: %v: %s", err, out)
		}
		args := []string{"-n", os.Args[0], "-test.run", "^" + name + "$", "-test.v", "-test.count=1"}
		if *longFaults {
			args = append(args, "-farmemd.long-faults")
		}
		cmd := exec.Command("unshare", args...)
		cmd.Env = append(os.Environ(), netnsSandbox+"=1")
		out, err := cmd.CombinedOutput()
		if err == nil && strings.Contains(string(out), "--- SKIP: "+name) {
			t.Skipf("skipped in its network namespace:\n%s", out)
		}
		t.Logf("in a network namespace of its own:\n%s", out)
		require.NoError(t, err)
		for _, k := range kinds {
			require.Contains(t, string(out), "--- PASS: "+name+"/"+k.name+" ", "it ran (not skipped) and passed")
		}
		return
	}
	ip := func(args ...string) {
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
	}
	ip("link", "set", "lo", "up")
	ns := fmt.Sprintf("farmemd-test-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	// Link i is process i's path to node 3: 10.231.<i+1>.1 here, 10.231.<i+1>.2 in ns.
	link := func(i int) string { return fmt.Sprintf("fmv%dn", i) }
	for i := range 2 {
		host := fmt.Sprintf("fmv%d", i)
		ip("link", "add", host, "type", "veth", "peer", "name", link(i))
		ip("link", "set", link(i), "netns", ns)
		ip("addr", "add", fmt.Sprintf("10.231.%d.1/24", i+1), "dev", host)
		ip("link", "set", host, "up")
		ip("-n", ns, "addr", "add", fmt.Sprintf("10.231.%d.2/24", i+1), "dev", link(i))
		ip("-n", ns, "link", "set", link(i), "up")
	}
	ip("-n", ns, "link", "set", "lo", "up")

	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			d3 := startDaemonUnder(t, []string{"ip", "netns", "exec", ns}, t.TempDir(), 3, fmt.Sprint(procNodeSize), "0.0.0.0:0")
			_, port, err := net.SplitHostPort(d3.addr)
			require.NoError(t, err)
			servers, addrs := startServers(t, 1, 2)
			pc := &partitionCluster{}
			for i := range pc.fabs {
				cl := &rdma.Cluster{DownTimeout: partitionDown, Memory: append(addrs[:2:2],
					rdma.NodeAddr{ID: 3, Addr: net.JoinHostPort(fmt.Sprintf("10.231.%d.2", i+1), port)})}
				pc.fabs[i] = dialCluster(t, cl)
			}
			in := rdma.NewInjector(servers, pc.fabs[:])
			set := func(state string) func(node farmem.NodeID, from ...int) error {
				return func(node farmem.NodeID, from ...int) error {
					if node != 3 {
						if state == "down" {
							return in.PartitionNodes(node, pc.hosted(from)...)
						}
						return in.HealNodes(node, pc.hosted(from)...)
					}
					for _, i := range from {
						if out, err := exec.Command("ip", "-n", ns, "link", "set", link(i), state).CombinedOutput(); err != nil {
							return fmt.Errorf("link %s %s: %w: %s", link(i), state, err, out)
						}
					}
					return nil
				}
			}
			pc.cut, pc.heal = set("down"), set("up")
			openPartitionStores(t, pc, k)
			scenario(t, pc)
		})
	}
}
