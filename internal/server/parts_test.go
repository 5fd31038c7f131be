package server_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cube/internal/api/wire"
	"cube/internal/client"
	"cube/internal/cube"
	"cube/internal/envd/protocol"
	"cube/internal/node"
	"cube/internal/node/nodefake"
	"cube/internal/server"
	"cube/internal/store"
)

// With Parts, Run assembles the same server on in-memory runtime, slots
// and agents: no root, no gVisor, no egress filter. It serves the API on
// a loopback port, runs sandboxes in the given runtime and slots, takes
// the key from its data directory, and stops cleanly with its context.
func TestRunWithParts(t *testing.T) {
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	envd := filepath.Join(dir, "cube-envd")
	os.WriteFile(envd, []byte("fake agent\n"), 0o755)
	const key = "e2b_parts_test_key_0123456789"
	os.WriteFile(filepath.Join(dataDir, "api-key"), []byte(key+"\n"), 0o600)
	rt, slots, agents := nodefake.NewRuntime(), nodefake.NewSlots(4), nodefake.NewAgents()

	// A template built on the same fakes before the server starts, as a
	// build would have.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.Open(filepath.Join(dataDir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	nd, err := node.New(node.Config{DataDir: dataDir, Envd: envd, Runtime: rt, Slots: slots, Store: st,
		DiskReserveMB: -1, EnvdVersion: protocol.Version, AgentAt: agents.At})
	if err != nil {
		t.Fatal(err)
	}
	tpl := &store.Template{ID: "tiny", Team: cube.FirstTeam, Status: store.TemplateBuilding, Rootfs: filepath.Join(dir, "rootfs"),
		DiskSizeMB: 64, MemoryMB: 256, CPUCount: 1, CreatedAt: time.Now().UTC()}
	os.MkdirAll(tpl.Rootfs, 0o755)
	if err := nd.BuildSnapshot(ctx, tpl, func(context.Context, netip.Addr) error { return nil }, nil); err != nil {
		t.Fatal(err)
	}
	tpl.Status = store.TemplateReady
	if err := st.Templates().Put(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	nd.Close()
	st.Close()

	ready := make(chan string, 1)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- server.Run(runCtx, server.Options{Listen: "127.0.0.1:0", DataDir: dataDir, Envd: envd, Slots: 4, MaxSandboxes: 4,
			DiskReserveMB: -1, Ready: func(addr string) { ready <- addr },
			Parts: &server.Parts{Runtime: rt, Slots: slots, AgentAt: agents.At}})
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	}
	c := client.New("http://"+addr, key)
	timeout := 60
	sb, err := c.CreateSandbox(ctx, wire.NewSandbox{TemplateID: "tiny", Timeout: &timeout})
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.Containers(); len(got) != 1 {
		t.Errorf("containers in the given runtime: %v", got)
	}
	if held := slots.Held(); len(held) != 1 {
		t.Errorf("slots held in the given pool: %v", held)
	}
	if inits := agents.Inits(); len(inits) == 0 || inits[len(inits)-1].Token != sb.EnvdAccessToken {
		t.Errorf("the given agents were not told the sandbox's token: %+v", inits)
	}
	if d, err := c.GetSandbox(ctx, sb.SandboxID); err != nil || d.State != "running" {
		t.Fatalf("GET: %+v %v", d, err)
	}
	if err := c.KillSandbox(ctx, sb.SandboxID); err != nil {
		t.Fatal(err)
	}
	if _, err := client.New("http://"+addr, "e2b_not_the_key").GetSandbox(ctx, "x"); err == nil {
		t.Error("another key was taken")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run after its context ended: %v", err)
	}

	// Parts without a runtime are refused, saying so.
	err = server.Run(ctx, server.Options{Listen: "127.0.0.1:0", DataDir: dataDir, Envd: envd, Parts: &server.Parts{Slots: slots}})
	if err == nil || !strings.Contains(err.Error(), "Runtime") {
		t.Fatalf("Run with Parts lacking a runtime: %v", err)
	}
}
