// Package celbench evaluates the expressions of ../cases.json over its objects with cel-go as
// kube-apiserver 1.35 compiles and runs an admission policy's expressions, so that kanon-cel's
// engine benchmark (../evaluate.rs, which reads the same file) can be compared with it.
//
// The programs are built by k8s.io/apiserver's own admission compiler (plugin/cel.NewCompiler
// over environment.MustBaseEnvSet(1.35), StoredExpressions): `object` and `oldObject` are dyn,
// and the base environment's program options are kube-apiserver's (OptOptimize, OptTrackCost with
// Kubernetes' cost estimator, CostLimit(PerCallLimit = 1,000,000), regex precompilation), plus
// InterruptCheckFrequency(100). A case marked "mutation" is compiled with HasPatchTypes, as
// MutatingAdmissionPolicy compiles JSONPatch expressions (the JSONPatch type and jsonpatch.escapeKey).
// Each evaluation is Program.ContextEval over an activation like the apiserver's, whose object is
// the unstructured map[string]any that apimachinery's JSON decoder gives (int64 for integers);
// decoding is done once, outside the timed loop.
//
//	go test -run TestResults -v          # each case's result and cost, one JSON line each
//	go test -run '^$' -bench . -count 10 # the timings (../../../../scripts/cel-bench.sh runs both sides)
package celbench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/version"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/mutation"
)

type caseSpec struct {
	Name       string `json:"name"`
	Object     string `json:"object"`
	Expression string `json:"expression"`
	Mutation   bool   `json:"mutation"`
}

type casesFile struct {
	Objects map[string]json.RawMessage `json:"objects"`
	Cases   []caseSpec                 `json:"cases"`
}

// accessor is an admission expression as the compiler takes it; any result type is accepted
// (each field of a policy would ask for its own: bool, string, list(JSONPatch)).
type accessor string

func (a accessor) GetExpression() string    { return string(a) }
func (a accessor) ReturnTypes() []*cel.Type { return []*cel.Type{cel.AnyType} }

// activation is kube-apiserver's evaluationActivation (plugin/cel/activation.go) for a CREATE:
// object set, the other variables null.
type activation struct {
	object, oldObject, params, request, namespace any
}

func (a *activation) ResolveName(name string) (any, bool) {
	switch name {
	case plugincel.ObjectVarName:
		return a.object, true
	case plugincel.OldObjectVarName:
		return a.oldObject, true
	case plugincel.ParamsVarName:
		return a.params, true
	case plugincel.RequestVarName:
		return a.request, true
	case plugincel.NamespaceVarName:
		return a.namespace, true
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }

type compiled struct {
	spec    caseSpec
	program cel.Program
	act     *activation
}

func load(tb testing.TB) []compiled {
	tb.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "cases.json"))
	if err != nil {
		tb.Fatalf("reading cases.json: %v", err)
	}
	var file casesFile
	if err := json.Unmarshal(raw, &file); err != nil {
		tb.Fatalf("parsing cases.json: %v", err)
	}
	objects := map[string]any{}
	for name, text := range file.Objects {
		var object any
		// apimachinery's decoder: int64 for integers, float64 otherwise, as an unstructured
		// object holds them.
		if err := utiljson.Unmarshal(text, &object); err != nil {
			tb.Fatalf("object %s: %v", name, err)
		}
		objects[name] = object
	}
	compiler := plugincel.NewCompiler(environment.MustBaseEnvSet(version.MajorMinor(1, 35)))
	var out []compiled
	for _, spec := range file.Cases {
		object, ok := objects[spec.Object]
		if !ok {
			tb.Fatalf("case %s: no object %q", spec.Name, spec.Object)
		}
		result := compiler.CompileCELExpression(accessor(spec.Expression),
			plugincel.OptionalVariableDeclarations{HasPatchTypes: spec.Mutation},
			environment.StoredExpressions)
		if result.Error != nil {
			tb.Fatalf("case %s: %v", spec.Name, result.Error)
		}
		out = append(out, compiled{
			spec:    spec,
			program: result.Program,
			act:     &activation{object: object},
		})
	}
	return out
}

func eval(ctx context.Context, c compiled) (ref.Val, uint64, error) {
	val, details, err := c.program.ContextEval(ctx, c.act)
	var cost uint64
	if details != nil && details.ActualCost() != nil {
		cost = *details.ActualCost()
	}
	return val, cost, err
}

// TestResults prints each case's result as JSON (the form kanon's bench prints too), and its
// cost, so that the script can check both sides agree before timing them.
func TestResults(t *testing.T) {
	ctx := context.Background()
	for _, c := range load(t) {
		val, cost, err := eval(ctx, c)
		line := map[string]any{"name": c.spec.Name, "cost": cost}
		if err != nil {
			line["error"] = err.Error()
		} else {
			line["value"] = native(val)
		}
		text, _ := json.Marshal(line)
		fmt.Println("RESULT " + string(text))
	}
}

var sink ref.Val

func BenchmarkEvaluate(b *testing.B) {
	ctx := context.Background()
	for _, c := range load(b) {
		b.Run(c.spec.Name, func(b *testing.B) {
			for b.Loop() {
				val, _, err := c.program.ContextEval(ctx, c.act)
				if err != nil {
					b.Fatal(err)
				}
				sink = val
			}
		})
	}
}

// native writes a CEL value as JSON: a JSONPatch as {op, path, from?, value}.
func native(v ref.Val) any {
	switch v := v.(type) {
	case types.Null:
		return nil
	case types.Bool:
		return bool(v)
	case types.Int:
		return int64(v)
	case types.Uint:
		return uint64(v)
	case types.Double:
		return float64(v)
	case types.String:
		return string(v)
	case *mutation.JSONPatchVal:
		out := map[string]any{"op": v.Op, "path": v.Path}
		if v.From != "" {
			out["from"] = v.From
		}
		if v.Val != nil {
			out["value"] = native(v.Val)
		}
		return out
	case traits.Lister:
		var out []any
		n := int64(v.Size().(types.Int))
		for i := int64(0); i < n; i++ {
			out = append(out, native(v.Get(types.Int(i))))
		}
		if out == nil {
			out = []any{}
		}
		return out
	case traits.Mapper:
		out := map[string]any{}
		for it := v.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			out[fmt.Sprint(native(k))] = native(v.Get(k))
		}
		return out
	}
	return fmt.Sprintf("%T %v", v, v.Value())
}
