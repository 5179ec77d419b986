package k8stest

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// ErrUnsupported is wrapped by the errors of an env source or downward-API field k8stest does not model (envFrom,
// configMapKeyRef, resourceFieldRef, spec.nodeName, status.podIP, ...): a test must not pass on a value it made up.
var ErrUnsupported = errors.New("not modelled by k8stest")

// orderedEnv is a container's environment: names in the order first set, a later set replacing the value.
type orderedEnv struct {
	names  []string
	values map[string]string
}

func (e *orderedEnv) set(k, v string) {
	if e.values == nil {
		e.values = map[string]string{}
	}
	if _, ok := e.values[k]; !ok {
		e.names = append(e.names, k)
	}
	e.values[k] = v
}

func (e *orderedEnv) lookup(k string) (string, bool) {
	v, ok := e.values[k]
	return v, ok
}

func (e *orderedEnv) list() []string {
	out := make([]string, len(e.names))
	for i, k := range e.names {
		out[i] = k + "=" + e.values[k]
	}
	return out
}

// KubernetesServiceHost is the cluster IP of the kubernetes Service in these tests' clusters (the first address of
// kubeadm's default service CIDR, 10.96.0.0/12; GKE's differs per cluster).
const KubernetesServiceHost = "10.96.0.1"

// KubernetesServiceEnv is what the kubelet gives every container of the default namespace's kubernetes Service
// (the API server, 443/TCP), whatever the pod's namespace and enableServiceLinks (getServiceEnvVarMap: the master
// service is always included): Docker links' variables, as for any Service with a cluster IP. The namespace's
// other Services (enableServiceLinks) are not modelled; the headless Service of a JobSet would add none.
func KubernetesServiceEnv() [][2]string {
	const host, port = KubernetesServiceHost, "443"
	url := "tcp://" + host + ":" + port
	return [][2]string{
		{"KUBERNETES_SERVICE_HOST", host},
		{"KUBERNETES_SERVICE_PORT", port},
		{"KUBERNETES_SERVICE_PORT_HTTPS", port},
		{"KUBERNETES_PORT", url},
		{"KUBERNETES_PORT_443_TCP", url},
		{"KUBERNETES_PORT_443_TCP_PROTO", "tcp"},
		{"KUBERNETES_PORT_443_TCP_PORT", port},
		{"KUBERNETES_PORT_443_TCP_ADDR", host},
	}
}

// resolveEnv adds the container's env to out as the kubelet's makeEnvironmentVariables does: in order, a value
// $(VAR)-expanded against the container's variables defined before it and the Service variables
// (KubernetesServiceEnv; not the device plugin's, which the kubelet adds apart), a valueFrom resolved and not
// expanded; an optional secretKeyRef whose Secret or key is missing leaves the variable unset.
func (p *Pod) resolveEnv(ctr *corev1.Container, out *orderedEnv, c Cluster) error {
	if len(ctr.EnvFrom) > 0 {
		return fmt.Errorf("envFrom: %w", ErrUnsupported)
	}
	defined := &orderedEnv{}
	for _, kv := range KubernetesServiceEnv() {
		defined.set(kv[0], kv[1])
	}
	for _, ev := range ctr.Env {
		v := ev.Value
		switch {
		case v != "":
			v = Expand(v, defined.lookup)
		case ev.ValueFrom != nil:
			var ok bool
			var err error
			if v, ok, err = p.valueFrom(ev.ValueFrom, c); err != nil {
				return fmt.Errorf("env %s: %w", ev.Name, err)
			} else if !ok {
				continue
			}
		}
		defined.set(ev.Name, v)
		out.set(ev.Name, v)
	}
	return nil
}

// valueFrom resolves a fieldRef (the pod's metadata) or a secretKeyRef (c.Secrets); ok is false for an optional
// secret that is missing.
func (p *Pod) valueFrom(src *corev1.EnvVarSource, c Cluster) (v string, ok bool, err error) {
	switch {
	case src.FieldRef != nil:
		v, err := p.field(src.FieldRef.FieldPath)
		return v, err == nil, err
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		optional := ref.Optional != nil && *ref.Optional
		secret, found := c.Secrets[ref.Name]
		if found {
			if v, found = secret[ref.Key]; found {
				return v, true, nil
			}
		}
		if optional {
			return "", false, nil
		}
		return "", false, fmt.Errorf("secretKeyRef: couldn't find key %q in Secret %s/%s", ref.Key, c.Namespace, ref.Name)
	}
	return "", false, fmt.Errorf("a valueFrom other than fieldRef and secretKeyRef: %w", ErrUnsupported)
}

// field is a downward-API field of the pod (the kubelet's podFieldSelectorRuntimeValue and
// fieldpath.ExtractFieldPathAsString): metadata.name, metadata.namespace, metadata.labels['KEY'],
// metadata.annotations['KEY'] (a key the pod lacks gives "", as in Kubernetes), spec.serviceAccountName. The
// others (metadata.uid, spec.nodeName, status.hostIP, status.podIP, ...) are not modelled.
func (p *Pod) field(path string) (string, error) {
	if base, rest, ok := strings.Cut(path, "['"); ok && strings.HasSuffix(rest, "']") {
		key := strings.TrimSuffix(rest, "']")
		switch base {
		case "metadata.labels":
			return p.Labels[key], nil
		case "metadata.annotations":
			return p.Annotations[key], nil
		}
		return "", fmt.Errorf("fieldRef %q: %w", path, ErrUnsupported)
	}
	switch path {
	case "metadata.name":
		return p.Name, nil
	case "metadata.namespace":
		return p.Namespace, nil
	case "spec.serviceAccountName":
		if p.Spec.ServiceAccountName == "" {
			return "default", nil
		}
		return p.Spec.ServiceAccountName, nil
	}
	return "", fmt.Errorf("fieldRef %q: %w", path, ErrUnsupported)
}
