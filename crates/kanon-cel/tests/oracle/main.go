// cel-oracle evaluates CEL expressions in kube-apiserver 1.35's own CEL environment, as its
// admission plugins (ValidatingAdmissionPolicy, MutatingAdmissionPolicy) compile and run them, so
// that kanon-cel can be compared with it (crates/kanon-cel/tests/oracle.rs).
//
// Input, one JSON object per line on stdin:
//
//	{"expr": "object.spec.replicas > 1", "variables": {"object": {...}}}
//
// with, optionally, an admission policy's variables the expression reads as `variables.<name>`,
// composed as the admission plugins compose them (plugin/cel's composition: declared with the
// type their expression gives, each computed when first read, its cost the request's):
//
//	"definitions": [{"name": "v0", "expression": "object.spec.containers"}]
//
// Output, one JSON object per input line on stdout, in order:
//
//	{"compile_error": "..."}                         parse or type-check refused it
//	{"program_error": "..."}                         cel.Program refused it
//	{"error": "...", "cost": n}                      evaluation failed
//	{"value": "<rendering>", "type": "int", "cost": n}
//
// plus "unstable": true when evaluating the case again gave another answer (map order).
//
// The rendering is a canonical text that the Rust side reproduces from kanon-cel's values
// (tests/oracle/render.rs): it distinguishes every CEL type and Kubernetes' opaque types.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/version"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// The variables of an admission expression, all bound (null when a set leaves one out).
// object, oldObject and params are declared dyn, as kube-apiserver declares them; request and
// namespaceObject get its object types (below).
var variableNames = []string{"object", "oldObject", "params", "namespaceObject", "request"}
var dynVariables = variableNames[:3]

type input struct {
	Expr        string                     `json:"expr"`
	Variables   map[string]json.RawMessage `json:"variables"`
	Definitions []definition               `json:"definitions,omitempty"`
}

// definition is one of an admission policy's variables.
type definition struct {
	Name       string `json:"name"`
	Expression string `json:"expression"`
}

type output struct {
	CompileError *string `json:"compile_error,omitempty"`
	ProgramError *string `json:"program_error,omitempty"`
	Error        *string `json:"error,omitempty"`
	Value        *string `json:"value,omitempty"`
	Type         *string `json:"type,omitempty"`
	Cost         *uint64 `json:"cost,omitempty"`
	// Checked: the expression's static type as the checker gave it (Type.String()), when it
	// compiled: what decides whether a policy's field accepts it.
	Checked *string `json:"checked,omitempty"`
	// Unstable: evaluating again gave another answer (Go's map iteration order is random, and
	// kube-apiserver iterates maps in it); the answer is one of them.
	Unstable bool `json:"unstable,omitempty"`
}

// Evaluations of each case; a result that depends on map order shows up as a differing answer
// among them. The orders are not equally likely: Go iterates a small map from a random one of its
// eight slots, so a two-entry map can come out in one order seven times in eight. 256 evaluations
// miss the rarer order about once in 10^15 ((7/8)^256); 32 missed it about once in 70, often
// enough to fail a random run of thousands of candidates. A case that costs more than
// costlyEvaluation (the corpus's loops near the cost limit, none of the random generator's) is
// evaluated fewer times, so that the corpus stays quick.
const (
	evaluations       = 256
	costlyEvaluations = 32
	costlyEvaluation  = 10_000
)

func main() {
	var decls []cel.EnvOption
	for _, name := range dynVariables {
		decls = append(decls, cel.Variable(name, cel.DynType))
	}
	// As the admission plugins' compiler declares them (plugin/cel's createEnvForOpts).
	requestType := plugincel.BuildRequestType()
	namespaceType := plugincel.BuildNamespaceType()
	decls = append(decls,
		cel.Variable("namespaceObject", namespaceType.CelType()),
		cel.Variable("request", requestType.CelType()))
	envSet, err := environment.MustBaseEnvSet(version.MajorMinor(1, 35)).Extend(environment.VersionedOptions{
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions:        decls,
		DeclTypes:         []*apiservercel.DeclType{namespaceType, requestType},
	})
	if err != nil {
		fail("declaring the variables: %v", err)
	}
	env, err := envSet.Env(environment.StoredExpressions)
	if err != nil {
		fail("building the environment: %v", err)
	}
	// One composition for every case with definitions: its `variables` type is emptied and
	// filled again for each (the checker reads the type's fields when it meets them, which is
	// how the apiserver compiles each variable in the environment the ones before it extended).
	composition, err := plugincel.NewCompositionEnv(plugincel.VariablesTypeName, envSet)
	if err != nil {
		fail("declaring `variables`: %v", err)
	}
	composedEnv, err := composition.EnvSet.Env(environment.StoredExpressions)
	if err != nil {
		fail("building the environment with `variables`: %v", err)
	}
	// `overloads`: each function's overload ids in the order the checker tries them (the
	// order they were declared in), as one JSON object.
	if len(os.Args) > 1 && os.Args[1] == "overloads" {
		order := map[string][]string{}
		for name, fn := range env.Functions() {
			for _, overload := range fn.OverloadDecls() {
				order[name] = append(order[name], overload.ID())
			}
		}
		if err := json.NewEncoder(os.Stdout).Encode(order); err != nil {
			fail("writing: %v", err)
		}
		return
	}

	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<26)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for in.Scan() {
		line := in.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		var req input
		if err := json.Unmarshal(line, &req); err != nil {
			fail("reading %q: %v", line, err)
		}
		var answer output
		if len(req.Definitions) > 0 {
			answer = runComposed(composedEnv, composition, req)
		} else {
			answer = run(env, req)
		}
		if err := enc.Encode(answer); err != nil {
			fail("writing: %v", err)
		}
		// One answer per question: the caller may wait for each line.
		if err := out.Flush(); err != nil {
			fail("writing: %v", err)
		}
	}
	if err := in.Err(); err != nil {
		fail("reading stdin: %v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "cel-oracle: "+format+"\n", args...)
	os.Exit(2)
}

func str(s string) *string { return &s }

// compile is env.Compile, with a panic of cel-go's (its literal validator indexes the type of an
// optional element that has none) as the refusal kube-apiserver makes of it.
func compile(env *cel.Env, expr string) (ast *cel.Ast, message *string) {
	defer func() {
		if p := recover(); p != nil {
			ast, message = nil, str(fmt.Sprintf("panic: %v", p))
		}
	}()
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, str(iss.Err().Error())
	}
	return ast, nil
}

func run(env *cel.Env, req input) output {
	return compileAndRepeat(env, req, eval)
}

// compileAndRepeat compiles the case's expression and evaluates it with evaluateOnce as many
// times as repeat needs.
func compileAndRepeat(env *cel.Env, req input, evaluateOnce func(cel.Program, map[string]any) result) output {
	ast, refused := compile(env, req.Expr)
	if refused != nil {
		return output{CompileError: refused}
	}
	checked := str(ast.OutputType().String())
	// The environment's own program options are kube-apiserver's: OptOptimize, cost tracking
	// with Kubernetes' cost estimator, the per-call cost limit (1,000,000).
	prg, err := env.Program(ast)
	if err != nil {
		return output{ProgramError: str(err.Error()), Checked: checked}
	}
	vars := bindings(req)
	return repeat(checked, func() result { return evaluateOnce(prg, vars) })
}

// runComposed is run for an expression that reads an admission policy's variables: each
// definition compiled in turn, declared for the ones after it, then the expression.
func runComposed(env *cel.Env, composition *plugincel.CompositionEnv, req input) output {
	for name := range composition.MapType.Fields {
		delete(composition.MapType.Fields, name)
	}
	composition.CompiledVariables = map[string]plugincel.CompilationResult{}
	for _, def := range req.Definitions {
		ast, refused := compile(env, def.Expression)
		if refused != nil {
			return output{CompileError: str("variable " + def.Name + ": " + *refused)}
		}
		prg, err := env.Program(ast)
		if err != nil {
			return output{ProgramError: str("variable " + def.Name + ": " + err.Error())}
		}
		composition.AddField(def.Name, ast.OutputType())
		composition.CompiledVariables[def.Name] = plugincel.CompilationResult{Program: prg, OutputType: ast.OutputType()}
	}
	return compileAndRepeat(env, req, func(prg cel.Program, vars map[string]any) result {
		return evalComposed(prg, vars, composition)
	})
}

// composedActivation binds the admission variables and `variables`, whose fields are computed
// when first read (as the admission plugins' activation binds them).
type composedActivation struct {
	vars      map[string]any
	variables ref.Val
}

func (a *composedActivation) ResolveName(name string) (any, bool) {
	if name == "variables" {
		return a.variables, true
	}
	v, ok := a.vars[name]
	return v, ok
}

func (a *composedActivation) Parent() interpreter.Activation { return nil }

// evalComposed is eval with `variables`: the cost is the expression's and the variables' it
// computed, as the admission plugins charge a request.
func evalComposed(prg cel.Program, vars map[string]any, composition *plugincel.CompositionEnv) result {
	ctx := composition.CreateContext(context.Background())
	activation := &composedActivation{vars: vars}
	activation.variables = ctx.Variables(activation)
	return evaluate(
		func() (ref.Val, *cel.EvalDetails, error) { return prg.ContextEval(ctx, activation) },
		ctx.GetAndResetCost,
	)
}

// bindings are the case's admission variables, every one bound (oldObject is null on CREATE,
// and so on).
func bindings(req input) map[string]any {
	vars := map[string]any{}
	for _, name := range variableNames {
		vars[name] = nil
	}
	for name, raw := range req.Variables {
		var v any
		// apimachinery's decoder gives int64 for integers and float64 otherwise, as an
		// unstructured object holds them.
		if err := utiljson.Unmarshal(raw, &v); err != nil {
			fail("variable %s: %v", name, err)
		}
		vars[name] = v
	}
	return vars
}

// repeat evaluates a case as many times as it takes to see whether its answer depends on map
// order.
func repeat(checked *string, evaluate func() result) output {
	first := evaluate()
	times := evaluations
	if first.cost > costlyEvaluation {
		times = costlyEvaluations
	}
	for i := 1; i < times; i++ {
		if again := evaluate(); again != first {
			first.unstable = true
			break
		}
	}
	answer := first.output()
	answer.Checked = checked
	return answer
}

// result is an output's comparable form.
type result struct {
	kind, text, typ string
	cost            uint64
	unstable        bool
}

func (r result) output() output {
	o := output{Unstable: r.unstable}
	switch r.kind {
	case "error":
		o.Error, o.Cost = str(r.text), &r.cost
	default:
		o.Value, o.Type, o.Cost = str(r.text), str(r.typ), &r.cost
	}
	return o
}

func eval(prg cel.Program, vars map[string]any) result {
	return evaluate(func() (ref.Val, *cel.EvalDetails, error) { return prg.Eval(vars) }, nil)
}

// evaluate runs one evaluation: its value or error and its cost (with `more`'s, when given),
// a panic of cel-go's as an error.
func evaluate(run func() (ref.Val, *cel.EvalDetails, error), more func() int64) (res result) {
	defer func() {
		if p := recover(); p != nil {
			res = result{kind: "error", text: fmt.Sprintf("panic: %v", p)}
		}
	}()
	val, det, err := run()
	var cost uint64
	if det != nil && det.ActualCost() != nil {
		cost = *det.ActualCost()
	}
	if more != nil {
		cost += uint64(more())
	}
	if err != nil {
		return result{kind: "error", text: err.Error(), cost: cost}
	}
	return result{kind: "value", text: render(val), typ: val.Type().TypeName(), cost: cost}
}

// render writes a value canonically; tests/oracle/render.rs must write kanon's values the same way.
func render(v ref.Val) string {
	switch v := v.(type) {
	case apiservercel.IP:
		return "net.IP(" + quote(v.Addr.String()) + ")"
	case apiservercel.CIDR:
		return "net.CIDR(" + quote(v.Prefix.String()) + ")"
	case apiservercel.Quantity:
		return "kubernetes.Quantity(" + quote(plainDecimal(v.Quantity.AsDec().String())) + ")"
	case *apiservercel.Quantity:
		// add and sub return pointers.
		return render(*v)
	case *apiservercel.IP:
		return render(*v)
	case *apiservercel.CIDR:
		return render(*v)
	case *apiservercel.URL:
		return render(*v)
	case *apiservercel.Semver:
		return render(*v)
	case *apiservercel.Format:
		return render(*v)
	case apiservercel.URL:
		return "kubernetes.URL(" + quote(v.URL.String()) + ")"
	case apiservercel.Semver:
		// Build metadata takes no part in a version's equality or order and no CEL function
		// reads it, so it is left out.
		sv := v.Version
		sv.Build = nil
		return "kubernetes.Semver(" + quote(sv.String()) + ")"
	case apiservercel.Format:
		return "kubernetes.NamedFormat(" + quote(v.Name) + ")"
	case types.Null:
		return "null"
	case types.Bool:
		return strconv.FormatBool(bool(v))
	case types.Int:
		return strconv.FormatInt(int64(v), 10)
	case types.Uint:
		return strconv.FormatUint(uint64(v), 10) + "u"
	case types.Double:
		return double(float64(v))
	case types.String:
		return quote(string(v))
	case types.Bytes:
		return quoteBytes([]byte(v))
	case types.Duration:
		return "duration(" + seconds(int64(v.Duration)) + ")"
	case types.Timestamp:
		return "timestamp(" + v.Time.Format(time.RFC3339Nano) + ")"
	case *types.Type:
		return "type(" + v.TypeName() + ")"
	case *types.Optional:
		if !v.HasValue() {
			return "optional.none()"
		}
		return "optional.of(" + render(v.GetValue()) + ")"
	case traits.Lister:
		var parts []string
		n := int64(v.Size().(types.Int))
		for i := int64(0); i < n; i++ {
			parts = append(parts, render(v.Get(types.Int(i))))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case traits.Mapper:
		// Map order is not part of a CEL value: entries are sorted by their rendering.
		var parts []string
		for it := v.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			parts = append(parts, render(k)+": "+render(v.Get(k)))
		}
		sort.Strings(parts)
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprintf("unknown %T %v", v, v.Value())
}

// quote: double quotes; `"`, `\`, newline and tab escaped, other controls as \xHH.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// quoteBytes: b"…" with printable ASCII as is and every other byte as \xHH.
func quoteBytes(bs []byte) string {
	var b strings.Builder
	b.WriteString(`b"`)
	for _, c := range bs {
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// double: the shortest digits that read back as the same float, placed as a plain decimal when
// the exponent is in [-7, 21), else in scientific notation: `1.5`, `3.0`, `1e+21`, `-0.0`.
func double(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	sci := strconv.FormatFloat(f, 'e', -1, 64) // [-]d[.ddd]e±XX
	sign := ""
	if strings.HasPrefix(sci, "-") {
		sign, sci = "-", sci[1:]
	}
	mantissa, expText, _ := strings.Cut(sci, "e")
	exp, _ := strconv.Atoi(expText)
	digits := strings.Replace(mantissa, ".", "", 1)
	return sign + placeDigits(digits, exp)
}

// placeDigits writes d.ddd × 10^exp.
func placeDigits(digits string, exp int) string {
	if exp < -7 || exp >= 21 {
		text := digits[:1]
		if len(digits) > 1 {
			text += "." + digits[1:]
		}
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		return text + "e" + sign + strconv.Itoa(exp)
	}
	if exp < 0 {
		return "0." + strings.Repeat("0", -exp-1) + digits
	}
	if len(digits) <= exp+1 {
		return digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	}
	return digits[:exp+1] + "." + digits[exp+1:]
}

// seconds writes nanoseconds exactly as seconds: `90s`, `-0.5s`, `0.000000001s`.
func seconds(nanos int64) string {
	sign := ""
	u := uint64(nanos)
	if nanos < 0 {
		sign, u = "-", uint64(-(nanos+1))+1
	}
	text := sign + strconv.FormatUint(u/1e9, 10)
	if frac := u % 1e9; frac != 0 {
		text += "." + strings.TrimRight(fmt.Sprintf("%09d", frac), "0")
	}
	return text + "s"
}

// plainDecimal normalizes a decimal's text: no trailing fractional zeros, no `-0`.
func plainDecimal(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	if s == "-0" {
		s = "0"
	}
	return s
}
