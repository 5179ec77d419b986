package k8stest

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TPUJobSet is a JobSet of TPU slices of a shape examples/kubernetes has no file for, written as those files
// write theirs: one replicatedJob whose replicas are the slices, each an Indexed Job of one pod per host of the
// slice (parallelism = completions = the hosts, backoffLimit 0, restartPolicy Never), DNS hostnames on and
// published before the pods are ready, spec.coordinator slice 0's first pod, and one container that requests
// ChipsPerHost chips on nodes of Accelerator and Topology. What the pods of it see is Pods' to say.
type TPUJobSet struct {
	Name          string // metadata.name: the pods' names start with it, and it is their subdomain
	ReplicatedJob string // the replicatedJob's name
	Slices        int    // its replicas (1 when 0)
	// Accelerator and Topology are the nodeSelector's AcceleratorLabel and TopologyLabel (tpu-v4-podslice and
	// 2x2x2 for a v4-16); ChipsPerHost is the container's google.com/tpu limit.
	Accelerator, Topology string
	ChipsPerHost          int
	Command               []string        // the container's command, $(VAR) as the kubelet expands it
	Env                   []corev1.EnvVar // the container's env
}

// JobSet is the manifest. It fails where the slice is not one GKE knows (TPUOf).
func (s TPUJobSet) JobSet() (*JobSet, error) {
	ctr := corev1.Container{Name: "tpu", Image: "tpurun-test", Command: s.Command, Env: s.Env,
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
			TPUResource: *resource.NewQuantity(int64(s.ChipsPerHost), resource.DecimalSI)}}}
	pod := corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		NodeSelector:  map[string]string{AcceleratorLabel: s.Accelerator, TopologyLabel: s.Topology},
		Containers:    []corev1.Container{ctr},
	}
	tpu, err := TPUOf(&pod, &pod.Containers[0])
	if err != nil {
		return nil, err
	}
	if tpu == nil {
		return nil, fmt.Errorf("TPUJobSet %s: ChipsPerHost %d: a TPU container requests chips", s.Name, s.ChipsPerHost)
	}
	indexed, hosts, backoff, yes := batchv1.IndexedCompletion, int32(tpu.Hosts), int32(0), true
	return &JobSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: APIVersion, Kind: Kind},
		ObjectMeta: metav1.ObjectMeta{Name: s.Name},
		Spec: JobSetSpec{
			Coordinator: &Coordinator{ReplicatedJob: s.ReplicatedJob},
			Network:     &Network{EnableDNSHostnames: &yes, PublishNotReadyAddresses: &yes},
			ReplicatedJobs: []ReplicatedJob{{
				Name:     s.ReplicatedJob,
				Replicas: int32(max(s.Slices, 1)),
				Template: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
					CompletionMode: &indexed, Parallelism: &hosts, Completions: &hosts, BackoffLimit: &backoff,
					Template: corev1.PodTemplateSpec{Spec: pod},
				}},
			}},
		},
	}, nil
}

// FromAnnotation is env var name read through the downward API from the pod's annotation key (JobSet puts each
// of its labels on the pod as an annotation too): what examples/kubernetes writes as
// valueFrom.fieldRef.fieldPath metadata.annotations['key'].
func FromAnnotation(name, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
		FieldPath: fmt.Sprintf("metadata.annotations['%s']", key)}}}
}

// FromSecret is env var name read from key of the namespace's Secret secret (valueFrom.secretKeyRef).
func FromSecret(name, secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}}
}
