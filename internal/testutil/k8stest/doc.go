// Package k8stest is test plumbing: it is imported only by tests (of examples/kubernetes, and of the pods tpurun
// runs in), never by tpurun itself, so that the tpurun binary links nothing of Kubernetes. It owns:
//
//   - a strict mirror of JobSet's published v1alpha2 API (JobSet, JobSetSpec, ReplicatedJob, Network, ...): the
//     module proxy does not serve sigs.k8s.io/jobset, so the types are copied by hand, field names and json tags
//     as JobSet publishes them (jobset.go says from which file and commit);
//   - strict decoding (DecodeJobSet, DecodeManifests): a field the API does not have is an error, in the JobSet's
//     own fields and in the k8s.io/api batch/v1 and core/v1 types it embeds;
//   - Pods: the pods a JobSet makes, each with its hostname and DNS name, the labels and annotations JobSet and the
//     Job controller put on it, and its container's environment and argv as the container would see them: the
//     manifest's env with the downward API, Secrets and $(VAR) expanded as the kubelet does, plus what GKE's TPU
//     webhook, the TPU device plugin and the Job controller inject (gke.go), and what the image, the container
//     runtime and the kubelet add (HOSTNAME, HOME, the kubernetes Service's variables): the one place for those
//     rules, which the pod tests of cmd/tpurun take each pod's environment from;
//   - TPUJobSet, a JobSet of TPU slices of a shape the examples do not have, written as they write theirs, for
//     tests that run pods of it (cmd/tpurun's pod tests), with FromAnnotation and FromSecret for its env;
//   - Expand, the kubelet's $(VAR) expansion.
package k8stest
