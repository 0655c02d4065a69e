// Command go-types writes, as JSON on standard output, what kube-apiserver's decoding of a
// built-in kind needs beyond its OpenAPI schema: for every Go struct the built-in kinds reach,
// its Go type name and, in Go's field order (fields of embedded structs promoted, as
// encoding/json sees them), each JSON field's Go type, whether it is `omitempty`, and the
// embedded structs it is reached through. kanon-schema embeds the output
// (data/go-types-v1.35.json) to word decoding errors as the apiserver does
// (`json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels of type string`)
// and to write an object back as the apiserver's round trip through its Go type does.
//
// Run by `cargo xtask go-types`; kanon-schema's tests/go_types.rs checks the embedded copy.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	admissionregistrationv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The API groups whose kinds kanon's schema holds (apiextensions and apiregistration live in
// other modules and are left out: their objects are decoded without these facts).
var groups = []func(*runtime.Scheme) error{
	admissionregistrationv1.AddToScheme, admissionregistrationv1beta1.AddToScheme,
	appsv1.AddToScheme, authenticationv1.AddToScheme, authorizationv1.AddToScheme,
	autoscalingv1.AddToScheme, autoscalingv2.AddToScheme, batchv1.AddToScheme,
	certificatesv1.AddToScheme, coordinationv1.AddToScheme, corev1.AddToScheme,
	discoveryv1.AddToScheme, eventsv1.AddToScheme, flowcontrolv1.AddToScheme,
	networkingv1.AddToScheme, nodev1.AddToScheme, policyv1.AddToScheme, rbacv1.AddToScheme,
	resourcev1.AddToScheme, schedulingv1.AddToScheme, storagev1.AddToScheme,
}

type field struct {
	Name string `json:"name"`
	// Go's spelling of the field's type (reflect.Type.String()): `*int32`, `[]v1.Container`,
	// `map[string]string`, `v1.PullPolicy`.
	Type      string   `json:"type"`
	OmitEmpty bool     `json:"omitempty,omitempty"`
	Via       []string `json:"via,omitempty"`
}

type structType struct {
	Go string `json:"go"`
	// The type decodes itself (json.Unmarshaler): Quantity, IntOrString, Time, RawExtension...
	Custom bool    `json:"custom,omitempty"`
	Fields []field `json:"fields,omitempty"`
}

var unmarshaler = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

func main() {
	scheme := runtime.NewScheme()
	for _, add := range groups {
		if err := add(scheme); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	out := map[string]structType{}
	var visit func(t reflect.Type)
	visit = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t.Name() == "" {
			return
		}
		name := openAPIName(t)
		if _, seen := out[name]; seen {
			return
		}
		st := structType{Go: t.String(), Custom: reflect.PointerTo(t).Implements(unmarshaler)}
		out[name] = st
		if !st.Custom {
			st.Fields = fields(t, nil, visit)
		}
		out[name] = st
	}
	for _, t := range scheme.AllKnownTypes() {
		visit(t)
	}
	names := make([]string, 0, len(out))
	for name := range out {
		names = append(names, name)
	}
	sort.Strings(names)
	// One type per line, in name order, so that a regeneration's diff reads type by type.
	fmt.Println("{")
	for i, name := range names {
		line, err := json.Marshal(out[name])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		key, _ := json.Marshal(name)
		comma := ","
		if i == len(names)-1 {
			comma = ""
		}
		fmt.Printf("  %s: %s%s\n", key, line, comma)
	}
	fmt.Println("}")
}

// fields lists t's JSON fields as encoding/json sees them: exported, not `json:"-"`, embedded
// structs without a name flattened into their parent (reached through `via`).
func fields(t reflect.Type, via []string, visit func(reflect.Type)) []field {
	var list []field
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, options, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			inner := ft
			if inner.Kind() == reflect.Pointer {
				inner = inner.Elem()
			}
			if inner.Kind() == reflect.Struct {
				list = append(list, fields(inner, append(append([]string{}, via...), f.Name), visit)...)
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		visit(ft)
		list = append(list, field{
			Name:      name,
			Type:      ft.String(),
			OmitEmpty: hasOption(options, "omitempty"),
			Via:       via,
		})
	}
	return list
}

func hasOption(options, want string) bool {
	for _, o := range strings.Split(options, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// openAPIName is the name kube-openapi gives a Go type: its package path with the domain
// reversed (`k8s.io/api/core/v1` → `io.k8s.api.core.v1`), then the type's name.
func openAPIName(t reflect.Type) string {
	parts := strings.Split(t.PkgPath(), "/")
	domain := strings.Split(parts[0], ".")
	for i, j := 0, len(domain)-1; i < j; i, j = i+1, j-1 {
		domain[i], domain[j] = domain[j], domain[i]
	}
	return strings.Join(append([]string{strings.Join(domain, ".")}, parts[1:]...), ".") + "." + t.Name()
}
