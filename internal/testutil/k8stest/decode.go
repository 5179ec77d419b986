package k8stest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// ErrStrict is wrapped by every decoding error that a strict API server would also refuse: a field the type does
// not have, a field given twice.
var ErrStrict = errors.New("strict decoding")

// decodeStrict decodes one YAML (or JSON) document into obj as a strict API server does (field validation
// Strict): YAML is turned into JSON refusing duplicate keys (sigs.k8s.io/yaml), then decoded case-sensitively by
// sigs.k8s.io/json, as apimachinery does, refusing unknown and duplicate fields. Numbers and booleans are not
// turned into strings: `value: 1` for a string field is an error, as kubectl apply reports it.
func decodeStrict(doc []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStrict, err)
	}
	strict, err := sigsjson.UnmarshalStrict(j, obj, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		return fmt.Errorf("%w: %w", ErrStrict, errors.Join(strict...))
	}
	return nil
}

// DecodeJobSet decodes one JobSet manifest (YAML or JSON) strictly: every field must be one of JobSet's published
// v1alpha2 API (the mirror in jobset.go) or of the k8s.io/api types it embeds (batch/v1 JobTemplateSpec and the
// core/v1 PodTemplateSpec in it), and apiVersion and kind must be jobset.x-k8s.io/v1alpha2 and JobSet.
func DecodeJobSet(doc []byte) (*JobSet, error) {
	var js JobSet
	if err := decodeStrict(doc, &js); err != nil {
		return nil, fmt.Errorf("JobSet: %w", err)
	}
	if js.APIVersion != APIVersion || js.Kind != Kind {
		return nil, fmt.Errorf("apiVersion %q kind %q, want %q %q", js.APIVersion, js.Kind, APIVersion, Kind)
	}
	return &js, nil
}

// Documents splits a YAML stream on its "---" separators into its non-empty documents, in order.
func Documents(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			out = append(out, doc)
		}
	}
}

// stripComments drops whole-line YAML comments: a document of comments alone is empty.
func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.Bytes()
}

// decoders are the kinds DecodeManifests knows, by apiVersion and kind, each decoded strictly into its type.
var decoders = map[[2]string]func([]byte) (any, error){
	{APIVersion, Kind}:  func(d []byte) (any, error) { return DecodeJobSet(d) },
	{"v1", "Secret"}:    decodeAs[corev1.Secret],
	{"v1", "ConfigMap"}: decodeAs[corev1.ConfigMap],
	{"v1", "Service"}:   decodeAs[corev1.Service],
	{"batch/v1", "Job"}: decodeAs[batchv1.Job],
}

func decodeAs[T any](doc []byte) (any, error) {
	obj := new(T)
	if err := decodeStrict(doc, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// DecodeManifests decodes every document of a YAML stream strictly into its type, in order: *JobSet (the mirror),
// *corev1.Secret, *corev1.ConfigMap, *corev1.Service, *batchv1.Job. A document of another apiVersion and kind is
// an error, as is any field its type does not have.
func DecodeManifests(data []byte) ([]any, error) {
	docs, err := Documents(data)
	if err != nil {
		return nil, err
	}
	var out []any
	for i, doc := range docs {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		decode, ok := decoders[[2]string{tm.APIVersion, tm.Kind}]
		if !ok {
			return nil, fmt.Errorf("document %d: apiVersion %q kind %q is not one k8stest decodes", i+1, tm.APIVersion, tm.Kind)
		}
		obj, err := decode(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d (%s): %w", i+1, tm.Kind, err)
		}
		out = append(out, obj)
	}
	return out, nil
}
