package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/coder/quartz"
	"github.com/nats-io/nats.go"

	"modelplane/agent"
	"modelplane/agent/cache"
	"modelplane/agent/process"
	"modelplane/bus"
	"modelplane/controlplane"
	"modelplane/egress"
	"modelplane/enrollment"
	"modelplane/runtime/onnx"
	"modelplane/trust"
)

// Dev's CPU nodes are real agents with the process driver: each replica
// is a child process of the built-in runtime (the modelplane binary) on a
// model directory the node's artifact cache fetched from the control plane
// and verified. They run in dev's process beside the simulated GPU nodes,
// on 127.0.0.1 like them, each with a port range of its own after theirs.

// devCacheBytes bounds each dev CPU node's artifact cache: the demo's
// models are small, and a newcomer's disk is not the node's to fill.
const devCacheBytes = 2 << 30

// devNode is how dev admits one node of its fleet, simulated or real, as
// production does: it enrolls with a join token (enrollDevNode), which
// registers its address, and connects to NATS with the node's own
// credential. Every dev node joins through it.
type devNode struct {
	natsURL string
	enroll  *enrollment.Service
	log     *slog.Logger
}

// join enrolls node at addr and connects it to NATS as itself; the
// session holds its credentials, the artifact token included.
func (j devNode) join(ctx context.Context, node string, addr trust.Address) (*nats.Conn, *nodeSession, error) {
	creds, err := enrollDevNode(ctx, j.enroll, node, addr)
	if err != nil {
		return nil, nil, err
	}
	sess, err := newNodeSession(localSource{j.enroll}, "", creds, j.log)
	if err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(j.natsURL, append(sess.Options(), bus.ErrorLogger(j.log), nats.Name("modelplane-agent-"+node), nats.MaxReconnects(-1))...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect nats: %w", err)
	}
	sess.Attach(nc)
	// Node credentials expire (enrollment.DefaultCredentialLifetime): a
	// dev left running rotates them as an agent does.
	go sess.RotateEvery(ctx, quartz.NewReal(), DefaultRotateEvery)
	return nc, sess, nil
}

// cpuNodes configures dev's CPU nodes.
type cpuNodes struct {
	join devNode
	// dir holds each node's state, cache and process records
	// (<dir>/<node>); the runtimes' user must reach it.
	dir      string
	nodes    int
	cores    int
	memoryMB int
	// portBase is node 0's first port; node i serves on the
	// SimPortsPerNode ports from portBase + i·SimPortsPerNode.
	portBase int
	// controlPlaneURL is where the caches fetch artifacts, each with its
	// node's own artifact token.
	controlPlaneURL string
	// self is the modelplane binary the runtimes run as; libraryEnv,
	// when set, tells them where the ONNX Runtime library is.
	self, libraryEnv string
}

// cpuNodeName is the name of dev's CPU node i.
func cpuNodeName(i int) string { return fmt.Sprintf("cpu-node-%02d", i+1) }

// startCPUNodes starts the CPU nodes' agents, each with its process
// driver, artifact cache and NATS connection. stop ends the agents and
// their runtimes: dev leaves no process behind.
func startCPUNodes(ctx context.Context, log *slog.Logger, cn cpuNodes) (stop func(), err error) {
	var agents []*agent.Agent
	var drivers []*process.Driver
	var conns []*nats.Conn
	stop = func() {
		for _, a := range agents {
			a.Stop()
		}
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, d := range drivers {
			d.Close(sctx)
		}
		for _, nc := range conns {
			nc.Close()
		}
	}
	defer func() {
		if err != nil {
			stop()
			err = fmt.Errorf("cpu nodes: %w", err)
		}
	}()
	for i := range cn.nodes {
		node := cpuNodeName(i)
		nlog := log.With(slog.String("node", node))
		addr := trust.Address{Host: "127.0.0.1", PortFirst: cn.portBase + i*SimPortsPerNode, PortLast: cn.portBase + (i+1)*SimPortsPerNode - 1}
		state := filepath.Join(cn.dir, node)
		if err := os.MkdirAll(state, 0o755); err != nil {
			return nil, err
		}
		env := tracingEnv()
		if cn.libraryEnv != "" {
			env = append(env, cn.libraryEnv)
		}
		drv, err := process.New(process.Config{StateDir: filepath.Join(state, "process"), Node: node, Self: cn.self, Env: env,
			Host: addr.Host, PortFirst: addr.PortFirst, PortLast: addr.PortLast, Log: nlog})
		if err != nil {
			return nil, err
		}
		drivers = append(drivers, drv)
		nc, sess, err := cn.join.join(ctx, node, addr)
		if err != nil {
			return nil, err
		}
		conns = append(conns, nc)
		cc, err := cache.New(cache.Config{Dir: filepath.Join(state, "cache"), LimitBytes: devCacheBytes, URL: cn.controlPlaneURL,
			TokenFunc: sess.ArtifactToken, Egress: &egress.Policy{AllowLoopback: true}, Log: nlog}) // dev's control plane is on loopback
		if err != nil {
			return nil, err
		}
		a, err := agent.New(agent.Config{Node: node, CPUCores: cn.cores, MemoryMB: cn.memoryMB, StateDir: state,
			Driver: drv, Cache: cc}, nc, nlog)
		if err != nil {
			return nil, err
		}
		if err := a.Start(ctx); err != nil {
			return nil, err
		}
		agents = append(agents, a)
	}
	return stop, nil
}

// runtimeUID is the user the process driver runs runtimes as, when it
// switches users at all (the agent runs as root); ok is false otherwise.
func runtimeUID() (uid uint32, ok bool) {
	if os.Geteuid() != 0 {
		return 0, false
	}
	for _, name := range []string{process.DefaultRunAs, "nobody"} {
		if u, err := user.Lookup(name); err == nil {
			if n, err := strconv.ParseUint(u.Uid, 10, 32); err == nil {
				return uint32(n), true
			}
		}
	}
	return 0, false
}

// reachable reports whether uid may traverse every directory above path
// (and path itself, for a directory) and, for a file, execute it.
func reachable(path string, uid uint32) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return false
	}
	ok := func(fi os.FileInfo) bool {
		st, _ := fi.Sys().(*syscall.Stat_t)
		return st != nil && (st.Uid == uid && fi.Mode().Perm()&0o100 != 0 || fi.Mode().Perm()&0o001 != 0)
	}
	if !ok(fi) {
		return false
	}
	for p := filepath.Dir(path); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil || !ok(fi) {
			return false
		}
		if p == filepath.Dir(p) {
			return true
		}
	}
}

// devNodesDir is where dev's CPU nodes keep their state: under the dev
// directory when the runtimes' user can reach it, else beside dev's
// PostgreSQL in /var/lib/modelplane (a checkout under /root).
func devNodesDir(dir string) (string, error) {
	nodes := filepath.Join(dir, "nodes")
	uid, switches := runtimeUID()
	if !switches || reachable(dir, uid) {
		return nodes, nil
	}
	sum := sha256.Sum256([]byte(dir))
	nodes = filepath.Join("/var/lib/modelplane", hex.EncodeToString(sum[:8]), "nodes")
	if err := os.MkdirAll(nodes, 0o755); err != nil {
		return "", err
	}
	return nodes, os.Chmod(filepath.Dir(nodes), 0o755)
}

// runtimeBinary is the modelplane binary the runtimes run: self when
// their user can execute it where it is, else a copy of it in binDir
// (`go run` builds into a private temporary directory, and a checkout
// under /root is private too).
func runtimeBinary(self, binDir string) (string, error) {
	return forRuntimes(self, binDir, "modelplane")
}

// runtimeLibrary is the ONNX Runtime library the runtimes load, as the
// environment entry that tells them where it is: the agent's own when
// their user can reach it, else a copy in binDir (install-deps.sh keeps it
// under the installing user's home, which another user may not enter). It
// is "" when there is no library to give: ONNX versions then fail to load
// with the runtime's message saying so.
func runtimeLibrary(binDir string) (string, error) {
	lib, err := onnx.LibraryPath()
	if err != nil {
		return "", nil
	}
	if _, err := os.Stat(lib); err != nil {
		return "", nil
	}
	if lib, err = forRuntimes(lib, binDir, filepath.Base(lib)); err != nil {
		return "", err
	}
	return onnx.LibraryEnv + "=" + lib, nil
}

// forRuntimes is src when the runtimes' user can reach it, else a copy of
// it named name in dir, readable and executable by everyone.
func forRuntimes(src, dir, name string) (string, error) {
	uid, switches := runtimeUID()
	if !switches || reachable(src, uid) {
		return src, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, name)
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(dir, "."+name+"-")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", err
	}
	return dst, nil
}

// startDevCPUNodes starts dev's CPU nodes against its stores and control
// plane, whose API serves artifacts at apiURL.
func startDevCPUNodes(ctx context.Context, log *slog.Logger, cfg DevConfig, dir string, st *devStores, cp *controlplane.ControlPlane,
	apiURL string) (func(), error) {
	memoryMB, err := agent.ParseMemory(cfg.CPUNodeMemory)
	if err != nil {
		return nil, err
	}
	nodesDir, err := devNodesDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cpu nodes: %w", err)
	}
	self := cfg.RuntimeBinary
	if self == "" {
		if self, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("cpu nodes: own executable: %w", err)
		}
	}
	if self, err = runtimeBinary(self, filepath.Join(nodesDir, "bin")); err != nil {
		return nil, fmt.Errorf("cpu nodes: runtime binary: %w", err)
	}
	lib, err := runtimeLibrary(filepath.Join(nodesDir, "bin"))
	if err != nil {
		return nil, fmt.Errorf("cpu nodes: onnx runtime library: %w", err)
	}
	return startCPUNodes(ctx, log, cpuNodes{
		join:     devNode{natsURL: st.natsURL, enroll: cp.Enrollment, log: log},
		dir:      nodesDir,
		nodes:    cfg.CPUNodes,
		cores:    cfg.CPUNodeCores,
		memoryMB: memoryMB,
		portBase: cfg.SimPortBase + cfg.SimNodes*SimPortsPerNode,
		// The API listener is open: requests wait in its backlog until it
		// serves.
		controlPlaneURL: apiURL,
		self:            self,
		libraryEnv:      lib,
	})
}

// loopbackURL is the http URL of a listener, on loopback when it listens
// on every address.
func loopbackURL(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return "http://" + a.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
