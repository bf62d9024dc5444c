package layouttest

import (
	"go/parser"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// module is the module path: an import under it is one of ours.
const module = "github.com/packetshaper/packetshaper"

// layers is the import graph the module holds to, in one table: for each
// package (its path in the module), the packages of ours its non-test
// files may import. A package not in the table fails the test until it is
// given a row: where a new package sits is a decision, written here. The
// "leaf" helpers (internal/hist, heap, countname, timing, suggest, term, inetsum) import nothing of
// ours. cmd/ and the test helpers may import what they need, but nothing
// imports cmd/ (TestLayers checks that for every package apart).
var layers = map[string][]string{
	// The public API, bottom up.
	"flows":  {},
	"shaper": {"flows", "internal/hist"},
	"nfq":    {"internal/hist"},
	"policy": {"flows", "shaper"},
	"replay": {"flows", "shaper", "internal/heap", "internal/countname"},

	// Leaf helpers.
	"internal/hist":      {},
	"internal/heap":      {},
	"internal/countname": {},
	"internal/timing":    {},
	"internal/suggest":   {},
	"internal/term":      {},
	"internal/clihelp":   {"internal/suggest"},
	"internal/buildinfo": {},
	"internal/inetsum":   {},

	// What the running shaper is made of.
	"internal/failopen": {"nfq"},
	"internal/fastpath": {"flows", "policy", "shaper"},
	"internal/offload":  {"flows", "shaper"},
	"internal/global":   {"flows", "shaper", "internal/heap"},
	"internal/divert":   {"flows", "policy", "shaper"},
	"internal/control":  {"internal/heap", "internal/countname"},
	"internal/top":      {"internal/control"},
	"internal/report":   {"internal/countname", "policy", "replay", "shaper"},
	"internal/daemon": {"flows", "shaper", "policy", "nfq", "internal/control", "internal/countname",
		"internal/failopen", "internal/fastpath", "internal/global", "internal/offload", "internal/hist", "internal/heap"},

	// Wiring, tools and test helpers.
	"cmd/packetshaper":    {"*"},
	"internal/cmd/psend":  {"internal/inetsum"},
	"internal/schemagen":  {"policy"},
	"internal/doccheck":   {},
	"internal/layouttest": {},
	"internal/netnstest":  {"internal/testutil"},
	"internal/testutil":   {"internal/testcerts", "internal/timing"},
	"internal/testcerts":  {},
	"scripts/gentestdata": {"*"},
	"scripts/testsum":     {},
	"scripts/timingtests": {},
	"e2e":                 {"*"},
}

// foreign lists, for a package, third-party or standard imports it must not
// have (a prefix each) with the reason: the guide's "shaper never a Redis
// client", "policy knows no store and no daemon", "replay and report need no
// kernel".
var foreign = map[string]map[string]string{
	"flows":           {"github.com/redis/": "flows knows no store", "github.com/cilium/ebpf": "flows knows no kernel program"},
	"shaper":          {"github.com/redis/": "shaper never holds a Redis client", "github.com/cilium/ebpf": "shaper knows no kernel program", "github.com/mdlayher/netlink": "shaper knows no netlink"},
	"policy":          {"github.com/redis/": "policy knows no store", "github.com/cilium/ebpf": "policy knows no kernel program", "github.com/mdlayher/netlink": "policy knows no netlink"},
	"nfq":             {"github.com/redis/": "nfq knows no store"},
	"replay":          {"github.com/redis/": "replay needs no store", "github.com/cilium/ebpf": "replay needs no kernel", "github.com/mdlayher/netlink": "replay needs no kernel", "github.com/florianl/go-nfqueue": "replay needs no kernel", "github.com/google/nftables": "replay needs no kernel"},
	"internal/report": {"github.com/redis/": "the report needs no store", "github.com/cilium/ebpf": "the report needs no kernel", "github.com/mdlayher/netlink": "the report needs no kernel", "github.com/google/nftables": "the report needs no kernel"},
}

// importGraph reads, for every package directory of the module (testdata
// and hidden directories aside), the imports of its non-test Go files.
func importGraph(t *testing.T) map[string]map[string]bool {
	t.Helper()
	root := ModuleRoot(t)
	fset := token.NewFileSet()
	g := map[string]map[string]bool{}
	for _, name := range SourceFiles(t) {
		f, err := parser.ParseFile(fset, filepath.Join(root, name), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		pkg := path.Dir(name)
		if g[pkg] == nil {
			g[pkg] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			g[pkg][p] = true
		}
	}
	return g
}

// violations is every import of g the tables do not allow, one line each.
func violations(g map[string]map[string]bool) []string {
	var out []string
	for pkg, imps := range g {
		allowed, ok := layers[pkg]
		if !ok {
			out = append(out, pkg+": a package with no row in layers: say in internal/layouttest/layers_test.go what it may import")
			continue
		}
		for imp := range imps {
			if rel, ours := strings.CutPrefix(imp, module+"/"); ours {
				if rel == "cmd" || strings.HasPrefix(rel, "cmd/") {
					out = append(out, pkg+" imports "+rel+": nothing imports cmd/ (it is wiring)")
					continue
				}
				if !allows(allowed, rel) {
					out = append(out, pkg+" imports "+rel+": not among its layers "+strings.Join(allowed, ", "))
				}
				continue
			}
			for prefix, why := range foreign[pkg] {
				if strings.HasPrefix(imp, prefix) {
					out = append(out, pkg+" imports "+imp+": "+why)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func allows(allowed []string, rel string) bool {
	for _, a := range allowed {
		if a == "*" || a == rel {
			return true
		}
	}
	return false
}

// TestLayers holds the module's imports to the layers table: imports point
// down (flows imports nothing of ours, shaper only flows and leaf helpers,
// nfq neither, policy no store and no daemon, replay and the report no
// kernel, nothing imports cmd/).
func TestLayers(t *testing.T) {
	g := importGraph(t)
	if len(g) < 20 {
		t.Fatalf("read %d packages: the module has more; is SourceFiles broken?", len(g))
	}
	for _, v := range violations(g) {
		t.Error(v)
	}
	for pkg := range layers {
		if _, ok := g[pkg]; !ok {
			if _, err := os.Stat(filepath.Join(ModuleRoot(t), pkg)); err != nil {
				t.Errorf("layers has a row for %s, which is not a package of the module: remove it", pkg)
			}
		}
	}
}

// TestLayersMutation is TestLayers' own mutation case: the module's graph
// with one forbidden import added (shaper importing policy, a step up;
// policy importing a Redis client; a package importing cmd/; a new package
// with no row) must be refused, each with its reason.
func TestLayersMutation(t *testing.T) {
	for _, c := range []struct{ pkg, imp, want string }{
		{"shaper", module + "/policy", "shaper imports policy: not among its layers"},
		{"flows", module + "/shaper", "flows imports shaper"},
		{"policy", "github.com/redis/go-redis/v9", "policy knows no store"},
		{"nfq", module + "/flows", "nfq imports flows"},
		{"replay", "github.com/cilium/ebpf", "replay needs no kernel"},
		{"internal/daemon", module + "/cmd/packetshaper", "nothing imports cmd/"},
		{"internal/newpkg", "fmt", "no row in layers"},
	} {
		g := importGraph(t)
		if len(violations(g)) != 0 {
			t.Fatal("the module's own graph has violations: see TestLayers")
		}
		if g[c.pkg] == nil {
			g[c.pkg] = map[string]bool{}
		}
		g[c.pkg][c.imp] = true
		v := violations(g)
		if len(v) != 1 || !strings.Contains(v[0], c.want) {
			t.Errorf("%s importing %s: violations %q, want one saying %q", c.pkg, c.imp, v, c.want)
		}
	}
}
