package node_test

import (
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/node/nodefake"
	"cube/internal/store"
)

// A create is placed by a template record up to a second old, so a burst
// of creates reads it once; after that second the record is read again.
func TestFakePlacementReadsATemplateOnceASecond(t *testing.T) {
	n := newFake(t, nodefake.Options{})
	ctx := fctx(t)
	first, err := n.PlacementTemplate(ctx, "", "tiny-alias")
	if err != nil || first.ID != "tiny" {
		t.Fatalf("placement template = %+v, %v", first, err)
	}
	// Changed in the store: placement goes by what it read...
	if err := n.Store.Templates().Update(ctx, "tiny", func(tpl *store.Template) error { tpl.MemoryMB = 4321; return nil }); err != nil {
		t.Fatal(err)
	}
	if again, err := n.PlacementTemplate(ctx, "", "tiny-alias"); err != nil || again.MemoryMB == 4321 {
		t.Fatalf("within the second: %+v, %v; want the record first read", again, err)
	}
	// ...while the create's own lookup reads it afresh.
	if fresh, err := n.TeamTemplate(ctx, "", "tiny-alias"); err != nil || fresh.MemoryMB != 4321 {
		t.Fatalf("create's lookup: %+v, %v", fresh, err)
	}
	time.Sleep(1100 * time.Millisecond)
	if later, err := n.PlacementTemplate(ctx, "", "tiny-alias"); err != nil || later.MemoryMB != 4321 {
		t.Fatalf("after the second: %+v, %v; want the record as changed", later, err)
	}
	if _, err := n.PlacementTemplate(ctx, "", "nope"); cube.KindOf(err) != cube.NotFound {
		t.Fatalf("unknown template: %v", err)
	}
}
