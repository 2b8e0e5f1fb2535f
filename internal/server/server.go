// Package server wires a workspace together and serves it: the store, the
// blob store, the compute target types, the workspace service and the API.
// It is the one place where target implementations are registered.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/ferry-ml/ferry/internal/api"
	"github.com/ferry-ml/ferry/internal/assets"
	"github.com/ferry-ml/ferry/internal/auth"
	"github.com/ferry-ml/ferry/internal/blob"
	"github.com/ferry-ml/ferry/internal/compute/local"
	"github.com/ferry-ml/ferry/internal/envimage"
	"github.com/ferry-ml/ferry/internal/environment/docker"
	"github.com/ferry-ml/ferry/internal/httplimit"
	"github.com/ferry-ml/ferry/internal/secrets"
	"github.com/ferry-ml/ferry/internal/serverurl"
	"github.com/ferry-ml/ferry/internal/serving/gateway"
	"github.com/ferry-ml/ferry/internal/spec"
	"github.com/ferry-ml/ferry/internal/store"
	"github.com/ferry-ml/ferry/internal/store/sqlite"
	"github.com/ferry-ml/ferry/internal/workload/online"
	"github.com/ferry-ml/ferry/internal/workspace"
)

// Config is how a server is set up.
type Config struct {
	DataDir string
	// WorkDir holds what jobs on this host use: the local target's
	// attempts (runs/), its built environments (environments/) and the
	// process provider's nodes (nodes/). It must be outside DataDir, which
	// jobs may not reach. "" = defaultWorkDir.
	WorkDir string
	// BlobEndpoints is ACCOUNT=URL,... : base URLs that stand in for Azure
	// storage accounts' blob services ($FERRY_BLOB_ENDPOINTS).
	BlobEndpoints string
	// RunAs is the account that jobs on the local target and process nodes
	// run as ("" = isolation.Choose's default: isolation.DefaultUser when
	// the server is root, else the server's own user).
	RunAs string
	// JobUIDs is the range of uids that attempts on the local target and
	// process nodes each run as one of, when jobs run as another account
	// ("" = isolation.DefaultUIDs; "none" = all as RunAs).
	JobUIDs       string
	Addr          string // host:port to listen on; port 0 picks a free one
	AdvertiseURL  string // URL runners use; default http://<listen address>
	LocalCapacity int    // slots of the built-in local target; 0 = CPUs
	// LocalExecutor runs the local target's attempts in one long-lived
	// `ferry local-executor` instead of a `ferry runner` process each.
	LocalExecutor   bool
	MaxSnapshotSize int64 // 0 = 1 GiB
	// OutputQuota bounds the bytes of one job attempt's outputs
	// (0 = workspace.DefaultOutputQuota, negative = none).
	OutputQuota int64
	// SizesFile is a YAML file of sizes that extend or override the
	// built-in catalog ("" = the built-in one only).
	SizesFile string
	// EnvironmentCatalogFile is a YAML file of curated environments that
	// extend or override the built-in catalog ("" = the built-in one only).
	EnvironmentCatalogFile string
	// Provider is the node provider of clusters that name none ("" = process).
	Provider string
	// AgentBinaries is a directory of ferry-linux-ARCH binaries that the
	// ssh provider copies to attached machines of other architectures.
	AgentBinaries string
	// NodeLease is how long a silent node keeps its jobs (0 = 30 s).
	NodeLease time.Duration
	// PreemptPoll and PreemptGrace: workspace.Config's (0 = 10 s and 30 s).
	PreemptPoll, PreemptGrace time.Duration
	// NodeJoinTimeout bounds how long a launched node may take to join (0 = 10 min).
	NodeJoinTimeout time.Duration
	// ServerlessIdle is the idle time of serverless jobs' implicit clusters (0 = 120 s).
	ServerlessIdle time.Duration
	EnvCacheSize   string // bound of the local machine's environment cache, such as 50g; "" = none
	LeaseTimeout   time.Duration
	CancelGrace    time.Duration // runners' SIGTERM→SIGKILL grace; 0 = 10 s
	Log            *slog.Logger
	Out            io.Writer // where the server tells its user what it did
	// Version is the server's version, recorded in Info for `ferry server
	// status`.
	Version string
	// ScheduleMinute is the length of job schedules' minute
	// (schedules.Config.Minute; 0 = a minute).
	ScheduleMinute time.Duration
	// Limits bound what one client may hold of the listener (the API,
	// the studio and the endpoints' gateway alike); a zero field is
	// httplimit.Defaults'.
	Limits httplimit.Limits
	// EndpointMaxBody, EndpointMaxBuffered, EndpointMaxBufferedPerAddr
	// and EndpointMaxRequests are the gateway's limits (gateway.Options';
	// 0 = its defaults).
	EndpointMaxBody, EndpointMaxBuffered, EndpointMaxBufferedPerAddr int64
	EndpointMaxRequests                                              int
}

// Info is written to DataDir/server.json once the server listens, so that
// the CLI finds a running local workspace.
type Info struct {
	URL string `json:"url"`
	PID int    `json:"pid"`
	// WorkDir is where the jobs on this machine work (Config.WorkDir).
	WorkDir string `json:"work_dir"`
	// Version is Config.Version.
	Version string `json:"version,omitempty"`
}

// InfoFile, TokenFile are names inside the data dir.
const (
	InfoFile  = "server.json"
	TokenFile = "owner.token"
	// KeyFile is the workspace key (mode 0600) that seals the SSH secrets
	// of attached machines at rest.
	KeyFile = "workspace.key"
)

// Run serves the workspace until ctx is done.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	limits := cfg.Limits.WithDefaults()
	if err := limits.Check(); err != nil {
		return err
	}
	if cfg.AdvertiseURL != "" {
		if _, err := serverurl.Parse(cfg.AdvertiseURL); err != nil {
			return fmt.Errorf("--advertise-url: %w; runners, agents and the CLI call the server there", err)
		}
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	// Private even when it was made before, by hand or by an older
	// server, with a looser mode: the store holds jobs' secrets.
	if err := privateDataDir(dir); err != nil {
		return err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	catalog, err := loadSizes(cfg.SizesFile)
	if err != nil {
		return err
	}
	envCatalog, err := loadEnvironmentCatalog(cfg.EnvironmentCatalogFile)
	if err != nil {
		return err
	}
	jobUser, err := jobAccount(ctx, cfg.RunAs)
	if err != nil {
		return err
	}
	work, err := workDir(dir, cfg.WorkDir, jobUser)
	if err != nil {
		return err
	}
	if filepath.Dir(work) == sharedWorkRoot {
		if err := recordDataDir(work, dir); err != nil {
			return err
		}
		pruneSharedWorkDirs(sharedWorkRoot, work, cfg.Log)
	}
	runAs, jobUIDs := "", ""
	if jobUser != nil {
		runAs = jobUser.Name
		if jobUIDs, err = jobUIDRange(cfg.JobUIDs); err != nil {
			return err
		}
		if jobUIDs != "" {
			cfg.Log.Info("jobs on this host run as unprivileged uids of their own", "uids", jobUIDs, "named_after", runAs, "work_dir", work)
		} else {
			cfg.Log.Info("jobs on this host run as an unprivileged user", "user", runAs, "uid", jobUser.UID, "work_dir", work)
		}
	}

	exe, err := runnerBinary(dir, work, cfg.Log)
	if err != nil {
		return err
	}
	st, err := sqlite.Open(filepath.Join(dir, "ferry.db"))
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer st.Close()
	blobs, err := blob.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		return fmt.Errorf("open blob store: %w", err)
	}
	tokenPath := filepath.Join(dir, TokenFile)
	if err := ensureOwnerToken(ctx, st, tokenPath); err != nil {
		return err
	}
	if err := privateDataDir(dir); err != nil { // the store's -wal and -shm are there now
		return err
	}
	fmt.Fprintf(cfg.Out, "owner token: %s (send it as `Authorization: Bearer <token>`, or let the CLI read it)\n", tokenPath)

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	url := cfg.AdvertiseURL
	if url == "" {
		url = "http://" + advertised(ln.Addr().(*net.TCPAddr))
	}
	// What this server started on this host and outlived its last run
	// (runners, the local executor, process nodes' agents) reads the URL
	// here when the one it was given no longer answers: a server back at
	// another address is found again. Left in place when the server
	// stops: it is where the server was last, and will be again.
	if err := serverurl.Write(work, url); err != nil {
		ln.Close()
		return err
	}
	urlFile := filepath.Join(work, serverurl.FileName)
	grace := ""
	if cfg.CancelGrace > 0 {
		grace = cfg.CancelGrace.String()
	}
	key, err := secrets.LoadOrCreateKey(filepath.Join(dir, KeyFile))
	if err != nil {
		return fmt.Errorf("workspace key: %w", err)
	}
	images := &envimage.Pushers{Snapshot: snapshotExtractor(blobs), WorkDir: work, Log: cfg.Log}
	targets := targetFactory(computeTypes, targetEnv{Log: cfg.Log, APIURL: url, Exe: exe, CancelGrace: cfg.CancelGrace, Key: key, Local: local.Config{
		Exe: exe, RunsDir: filepath.Join(work, "runs"), CacheDir: filepath.Join(dir, "cache"),
		Capacity: cfg.LocalCapacity, CancelGrace: grace, RunAs: runAs, JobUIDs: jobUIDs, GPUs: len(hostGPUs()), Executor: cfg.LocalExecutor, APIFile: urlFile,
		EnvCacheDir: filepath.Join(work, "environments"), EnvCacheSize: cfg.EnvCacheSize,
		Docker: func(ctx context.Context) error {
			d, err := docker.Connect(ctx)
			if err == nil {
				d.API.Close()
			}
			return err
		},
	}, Snapshot: snapshotExtractor(blobs), WorkDir: work, Images: images})
	provs := newProviders(exe, work, cfg.Provider)
	provs.runAs, provs.jobUIDs, provs.urlFile = runAs, jobUIDs, urlFile
	provs.key, provs.binaries, provs.log = key, cfg.AgentBinaries, cfg.Log
	provs.serverAddr = dialable(ln.Addr().(*net.TCPAddr))
	provs.loopbackOnly = ln.Addr().(*net.TCPAddr).IP.IsLoopback()
	defer provs.tunnels.Close()
	var wl api.Workloads
	gw := gateway.New(gateway.Options{Log: cfg.Log,
		MaxBody: cfg.EndpointMaxBody, MaxBuffered: cfg.EndpointMaxBuffered, MaxBufferedPerAddr: cfg.EndpointMaxBufferedPerAddr,
		MaxRequests: cfg.EndpointMaxRequests,
		ColdStart: func(ctx context.Context, endpoint, deployment string) error {
			return wl.Online.ColdStart(ctx, endpoint, deployment)
		},
		CheckToken: func(_ context.Context, endpoint, token string) bool {
			return wl.Online.CheckEndpointToken(endpoint, token)
		}})
	blobEndpoints, err := spec.ParseBlobEndpoints(cfg.BlobEndpoints)
	if err != nil {
		return err
	}
	// The built-in workspaceblobstore: a folder the jobs of this host read.
	defaultDatastore := filepath.Join(work, "datastores", assets.DefaultDatastore)
	if err := os.MkdirAll(defaultDatastore, 0o755); err != nil {
		return fmt.Errorf("the default datastore's folder: %w", err)
	}
	ws, err := workspace.New(ctx, workspace.Config{
		Store: st, Blobs: blobs, LogDir: filepath.Join(dir, "logs"), APIURL: url,
		Targets: targets, PoolTypes: poolTypes,
		MaxSnapshotSize: cfg.MaxSnapshotSize, OutputQuota: cfg.OutputQuota, LeaseTimeout: cfg.LeaseTimeout, CancelGrace: cfg.CancelGrace, Log: cfg.Log,
		Sizes: catalog, Environments: envCatalog, Providers: provs.factory(), CheckProvider: provs.check, Secrets: key,
		NodeLease: cfg.NodeLease, NodeHeartbeat: nodeHeartbeat(cfg.NodeLease),
		PreemptPoll: cfg.PreemptPoll, PreemptGrace: cfg.PreemptGrace,
		JoinTimeout: cfg.NodeJoinTimeout, ServerlessIdle: cfg.ServerlessIdle,
		BlobEndpoints: blobEndpoints, DefaultDatastoreDir: defaultDatastore,
	})
	if err != nil {
		return err
	}
	wl, err = registerWorkloads(ctx, ws, st, cfg, online.Config{Secrets: key, Router: gatewayRouter{gw},
		ProbeReplica: replicaProber(), KubeReplicas: newKubeReplicas(cfg.Log, images), Log: cfg.Log})
	if err != nil {
		return err
	}
	apiServer := api.New(ws, wl, st, cfg.Log)
	apiServer.MountGateway(gw, gw.Metrics())
	handler, err := withStudio(apiServer, studioSessions{st}, cfg.Log)
	if err != nil {
		return err
	}
	hs := limits.Server(handler)
	if err := writeJSONFile(filepath.Join(dir, InfoFile), Info{URL: url, PID: os.Getpid(), WorkDir: work, Version: cfg.Version}); err != nil {
		return err
	}
	defer os.Remove(filepath.Join(dir, InfoFile))
	fmt.Fprintf(cfg.Out, "ferry workspace serving at %s (data in %s)\n", url, dir)
	cfg.Log.Info("serving", "url", url, "data_dir", dir)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go ws.Run(runCtx)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(limits.Listen(ln)) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(shutCtx) // followers of logs are cut; they reconnect
	return nil
}

// dialable is an address this host can dial to reach a listener on a.
func dialable(a *net.TCPAddr) string {
	ip := a.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(a.Port))
}

func advertised(a *net.TCPAddr) string {
	if a.IP.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", fmt.Sprint(a.Port))
	}
	return a.String()
}

// ensureOwnerToken makes the owner token on first start and makes sure the
// store knows the one in the file on every later start.
func ensureOwnerToken(ctx context.Context, st store.Store, path string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		secret, hash := auth.NewToken()
		if err := st.CreateToken(ctx, store.Token{Hash: hash, Kind: auth.KindOwner, Subject: "owner", Created: time.Now()}); err != nil {
			return fmt.Errorf("store owner token: %w", err)
		}
		return writeFileAtomic(path, []byte(secret+"\n"), 0o600)
	}
	if err != nil {
		return fmt.Errorf("read owner token: %w", err)
	}
	hash := auth.Hash(string(data))
	if _, err := st.TokenByHash(ctx, hash); errors.Is(err, store.ErrNotFound) {
		return st.CreateToken(ctx, store.Token{Hash: hash, Kind: auth.KindOwner, Subject: "owner", Created: time.Now()})
	} else if err != nil {
		return err
	}
	return nil
}

func writeJSONFile(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data, 0o600)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// lockDir takes an exclusive lock on the data dir, so two servers never
// share one store.
func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "server.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("another ferry server is using %s; stop it or pick another --data-dir", dir)
	}
	return func() { f.Close() }, nil
}

// nodeHeartbeat is how often agents heartbeat: often enough that a few
// lost heartbeats do not lose a node.
func nodeHeartbeat(lease time.Duration) time.Duration {
	if lease <= 0 {
		return 0 // the workspace's default
	}
	return max(time.Second, min(2*time.Second, lease/3)) // the protocol counts whole seconds
}
