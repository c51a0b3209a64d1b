package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/farmem/farmem/farmem"
	"github.com/stretchr/testify/require"
)

func parseReply(s string) (reply, error) {
	return readReply(bufio.NewReaderSize(strings.NewReader(s), 16), nil, 0)
}

func TestRESPReader(t *testing.T) {
	good := []struct {
		in   string
		want reply
	}{
		{"+OK\r\n", reply{kind: '+', str: []byte("OK")}},
		{"-ERR wrong\r\n", reply{kind: '-', str: []byte("ERR wrong")}},
		{":-42\r\n", reply{kind: ':', num: -42}},
		{"$5\r\nhe\r\no\r\n", reply{kind: '$', str: []byte("he\r\no")}},
		{"$0\r\n\r\n", reply{kind: '$', str: []byte{}}},
		{"$-1\r\n", reply{kind: '$', null: true}},
		{"*-1\r\n", reply{kind: '*', null: true}},
		{"*2\r\n:1\r\n*1\r\n+x\r\n", reply{kind: '*', num: 2, elems: []reply{{kind: ':', num: 1},
			{kind: '*', num: 1, elems: []reply{{kind: '+', str: []byte("x")}}}}}},
		{"+" + strings.Repeat("y", 100) + "\r\n", reply{kind: '+', str: []byte(strings.Repeat("y", 100))}}, // longer than the reader's buffer
	}
	for _, g := range good {
		got, err := parseReply(g.in)
		require.NoError(t, err, g.in)
		require.Equal(t, g.want, got, g.in)
	}
	bad := []struct{ in, want string }{
		{"", "EOF"},
		{"+OK", "unexpected EOF"},
		{"+OK\n", "not ended by CRLF"},
		{"\r\n", "empty line"},
		{"?x\r\n", "unknown type byte"},
		{":4x\r\n", "integer"},
		{"$x\r\n", "bulk length"},
		{"$-2\r\n", "bulk length"},
		{"$99999999999\r\n", "bulk length"},
		{"$5\r\nab", "unexpected EOF"},
		{"$2\r\nabcd", "not ended by CRLF"},
		{"*99999999\r\n", "array length"},
		{"*1\r\n", "EOF"},
		{strings.Repeat("*1\r\n", 20) + ":1\r\n", "nested deeper"},
		{"+" + strings.Repeat("z", respMaxLine+10) + "\r\n", "longer than"},
	}
	for _, b := range bad {
		_, err := parseReply(b.in)
		require.Error(t, err, b.in)
		require.Contains(t, err.Error(), b.want, b.in)
	}
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	writeCommand(w, []byte("SET"), []byte("k"), []byte("v\r\n"))
	require.NoError(t, w.Flush())
	require.Equal(t, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nv\r\n\r\n", buf.String())
}

// FuzzRESPReply: no byte stream panics the reader or makes it allocate beyond the stream.
func FuzzRESPReply(f *testing.F) {
	for _, s := range []string{"+OK\r\n", "$3\r\nabc\r\n", "*2\r\n$-1\r\n:5\r\n", "-ERR\r\n", "$67108864\r\nab"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReader(bytes.NewReader(data))
		for range 4 {
			r, err := readReply(br, nil, 0)
			if err != nil {
				return
			}
			if r.kind == '$' && !r.null {
				require.LessOrEqual(t, len(r.str), len(data))
			}
		}
	})
}

func TestStartRedisMissing(t *testing.T) {
	_, err := StartRedis(t.Context(), RedisOptions{Binary: "farmem-no-such-redis-server"})
	require.ErrorIs(t, err, ErrRedisNotInstalled)
	require.ErrorContains(t, err, "apt-get install redis-server")
	// Nothing listens on this port once the listener is closed.
	port, err := freePort()
	require.NoError(t, err)
	r := DialRedis("127.0.0.1:" + strconv.Itoa(port))
	_, err = r.Open(t.Context())
	require.Error(t, err)
	require.NoError(t, r.Close())
	require.NoError(t, r.Close())
}

func startRedisOrSkip(t *testing.T) *Redis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed (apt-get install redis-server): skipping the redis peer")
	}
	r, err := StartRedis(t.Context(), RedisOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// The redis peer behaves as the other stores do: insert fails on an existing key, update on a
// missing one, and Close stops the server.
func TestRedisPeer(t *testing.T) {
	r := startRedisOrSkip(t)
	ctx := t.Context()
	s, err := r.Open(ctx)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Insert(ctx, []byte("k1"), []byte("v1")))
	require.ErrorIs(t, s.Insert(ctx, []byte("k1"), []byte("v2")), ErrExists)
	v, err := s.Read(ctx, []byte("k1"))
	require.NoError(t, err)
	require.Equal(t, "v1", string(v))
	require.NoError(t, s.Update(ctx, []byte("k1"), []byte("v3\r\nwith CRLF")))
	v, err = s.Read(ctx, []byte("k1"))
	require.NoError(t, err)
	require.Equal(t, "v3\r\nwith CRLF", string(v))
	require.ErrorIs(t, s.Update(ctx, []byte("k2"), []byte("x")), ErrNotFound)
	_, err = s.Read(ctx, []byte("k2"))
	require.ErrorIs(t, err, ErrNotFound)
	big := bytes.Repeat([]byte{7}, 200<<10)
	require.NoError(t, s.Insert(ctx, []byte("big"), big))
	v, err = s.Read(ctx, []byte("big"))
	require.NoError(t, err)
	require.Equal(t, big, v)

	// A canceled context fails the op and ends the session; others are unaffected.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.Read(cctx, []byte("k1"))
	require.ErrorIs(t, err, context.Canceled)
	s2, err := r.Open(ctx)
	require.NoError(t, err)
	_, err = s2.Read(ctx, []byte("k1"))
	require.NoError(t, err)
	require.NoError(t, s2.Close())
	require.NoError(t, s2.Close())
	_, err = s2.Read(ctx, []byte("k1"))
	require.ErrorIs(t, err, farmem.ErrClosed)

	require.NoError(t, r.Close())
	select {
	case <-r.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("redis-server still running after Close")
	}
	_, err = r.Open(ctx)
	require.ErrorIs(t, err, farmem.ErrClosed)
	require.NoError(t, r.Close())
}

// The peers in one run: the Go map and redis load and run the same workload side by side.
func TestRunWithPeers(t *testing.T) {
	startRedisOrSkip(t) // skips here with the reason when redis is missing
	var log bytes.Buffer
	peers := Peers(t.Context(), &log)
	defer func() {
		for _, p := range peers {
			require.NoError(t, p.Close())
		}
	}()
	require.Len(t, peers, 2, log.String())
	w := smallWorkload(t, "a", map[string]string{"operationcount": "4000"})
	rep, err := Run(t.Context(), Config{Workload: w, Stores: peers, Clients: 2})
	require.NoError(t, err)
	for _, name := range []string{"gomap", "redis"} {
		load := runRow(t, rep, name, PhaseLoad)
		require.Empty(t, load.Error)
		require.Equal(t, uint64(2000), load.Ops)
		run := runRow(t, rep, name, PhaseRun)
		require.Zero(t, run.Errors, run.FirstError)
		require.Equal(t, uint64(4000), run.Ops)
		require.Nil(t, run.Costs)
	}
	var table bytes.Buffer
	require.NoError(t, rep.WriteTable(&table))
	t.Log("\n" + table.String())
}

func TestPeersWithoutRedis(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	var log bytes.Buffer
	peers := Peers(t.Context(), &log)
	require.Len(t, peers, 1)
	require.Equal(t, "gomap", peers[0].Name())
	require.Contains(t, log.String(), "skipping the redis peer")
	_, err := StartRedis(t.Context(), RedisOptions{})
	require.True(t, errors.Is(err, ErrRedisNotInstalled) && errors.Is(err, exec.ErrNotFound), "%v", err)
}
