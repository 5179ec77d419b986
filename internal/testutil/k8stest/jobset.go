package k8stest

import (
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The JobSet API, group jobset.x-k8s.io, version v1alpha2, mirrored by hand from JobSet's published Go types:
// kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go at commit 08dfbdfd682714a9ab929633eca8dc95315187e7
// (2026-08-18, v0.13.0-devel). Every field of JobSet.spec is here with JobSet's own name and json tag, so that a
// valid JobSet decodes and a field JobSet does not have fails (strict decoding); the status is left out: a
// manifest has none. Update from that file, not by guessing.
const (
	// Group and Version of the JobSet API (groupversion_info.go), and its apiVersion as a manifest writes it.
	Group      = "jobset.x-k8s.io"
	Version    = "v1alpha2"
	APIVersion = Group + "/" + Version
	// Kind is the kind of a JobSet object.
	Kind = "JobSet"
)

// JobSet is the Schema for the jobsets API (without its status).
type JobSet struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object metadata for JobSet
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the specification for jobset
	Spec JobSetSpec `json:"spec,omitempty"`
}

// JobSetSpec defines the desired state of JobSet.
type JobSetSpec struct {
	// replicatedJobs is the group of jobs that will form the set.
	ReplicatedJobs []ReplicatedJob `json:"replicatedJobs,omitempty"`
	// network defines the networking options for the jobset.
	Network *Network `json:"network,omitempty"`
	// successPolicy configures when to declare the JobSet as succeeded.
	SuccessPolicy *SuccessPolicy `json:"successPolicy,omitempty"`
	// failurePolicy configures when to declare the JobSet as failed.
	FailurePolicy *FailurePolicy `json:"failurePolicy,omitempty"`
	// startupPolicy configures in what order jobs must be started (deprecated upstream for dependsOn).
	StartupPolicy *StartupPolicy `json:"startupPolicy,omitempty"`
	// suspend suspends all running child Jobs when set to true.
	Suspend *bool `json:"suspend,omitempty"`
	// coordinator names the pod whose stable network endpoint, <pod hostname>.<subdomain>, JobSet puts on every Job
	// and pod as the jobset.sigs.k8s.io/coordinator label and annotation.
	Coordinator *Coordinator `json:"coordinator,omitempty"`
	// managedBy is the controller that manages the JobSet.
	ManagedBy *string `json:"managedBy,omitempty"`
	// ttlSecondsAfterFinished limits the lifetime of a finished JobSet.
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
	// volumeClaimPolicies are PVCs shared by the ReplicatedJobs.
	VolumeClaimPolicies []VolumeClaimPolicy `json:"volumeClaimPolicies,omitempty"`
}

// ReplicatedJob is a Job template and how many Jobs (replicas) are made from it: Job names
// <jobSet.name>-<replicatedJob.name>-<job-index>.
type ReplicatedJob struct {
	// name is the name of the entry and will be used as a suffix for the Job name.
	Name string `json:"name"`
	// groupName defines the name of the group this ReplicatedJob belongs to (CRD default "default").
	GroupName string `json:"groupName,omitempty"`
	// template defines the template of the Job that will be created.
	Template batchv1.JobTemplateSpec `json:"template"`
	// replicas is the number of jobs that will be created from this ReplicatedJob's template (CRD default 1).
	Replicas int32 `json:"replicas,omitempty"`
	// dependsOn lists the ReplicatedJobs this one waits for.
	DependsOn []DependsOn `json:"dependsOn,omitempty"`
}

// DependsOn defines the dependency on the previous ReplicatedJob status.
type DependsOn struct {
	// name of the previous ReplicatedJob.
	Name string `json:"name"`
	// status defines the condition for the ReplicatedJob: Ready or Complete.
	Status DependsOnStatus `json:"status"`
}

// DependsOnStatus is Ready or Complete.
type DependsOnStatus string

// Network is the networking of the JobSet's pods.
type Network struct {
	// enableDNSHostnames allows pods to be reached via their hostnames:
	// <jobSet.name>-<spec.replicatedJob.name>-<job-index>-<pod-index>.<subdomain>. JobSet's webhook defaults it
	// to true.
	EnableDNSHostnames *bool `json:"enableDNSHostnames,omitempty"`
	// subdomain is an explicit choice for a network subdomain name; defaults to <jobSet.name>.
	Subdomain string `json:"subdomain,omitempty"`
	// publishNotReadyAddresses indicates if DNS records of pods should be published before the pods are ready.
	// Defaults to true.
	PublishNotReadyAddresses *bool `json:"publishNotReadyAddresses,omitempty"`
}

// Operator is All or Any.
type Operator string

// FailurePolicyAction is the action the JobSet controller takes for a matching FailurePolicyRule.
type FailurePolicyAction string

// FailurePolicyRule maps Job failures to an action.
type FailurePolicyRule struct {
	Name                        string              `json:"name"`
	Action                      FailurePolicyAction `json:"action"`
	OnJobFailureReasons         []string            `json:"onJobFailureReasons,omitempty"`
	OnJobFailureMessagePatterns []string            `json:"onJobFailureMessagePatterns,omitempty"`
	TargetReplicatedJobs        []string            `json:"targetReplicatedJobs,omitempty"`
}

// FailurePolicy configures when the JobSet fails, and how often it is restarted (every Job recreated, the
// jobset.sigs.k8s.io/restart-attempt label one higher) before that.
type FailurePolicy struct {
	// maxRestarts defines the limit on the number of JobSet restarts.
	MaxRestarts int32 `json:"maxRestarts,omitempty"`
	// restartStrategy: Recreate (default), BlockingRecreate or InPlaceRestart.
	RestartStrategy JobSetRestartStrategy `json:"restartStrategy,omitempty"`
	// rules are evaluated in order; without a match the RestartJobSet action applies.
	Rules []FailurePolicyRule `json:"rules,omitempty"`
}

// JobSetRestartStrategy is Recreate, BlockingRecreate or InPlaceRestart.
type JobSetRestartStrategy string

// SuccessPolicy configures when the JobSet succeeds.
type SuccessPolicy struct {
	// operator determines either All or Any of the selected jobs should succeed.
	Operator Operator `json:"operator"`
	// targetReplicatedJobs are the names of the replicated jobs the operator will apply to.
	TargetReplicatedJobs []string `json:"targetReplicatedJobs,omitempty"`
}

// StartupPolicyOptions is AnyOrder or InOrder.
type StartupPolicyOptions string

// StartupPolicy configures in what order the ReplicatedJobs start.
type StartupPolicy struct {
	StartupPolicyOrder StartupPolicyOptions `json:"startupPolicyOrder"`
}

// Coordinator names the coordinator pod: the pod of completion index podIndex of Job jobIndex of replicatedJob.
type Coordinator struct {
	// replicatedJob is the name of the ReplicatedJob which contains the coordinator pod.
	ReplicatedJob string `json:"replicatedJob"`
	// jobIndex is the index of Job which contains the coordinator pod.
	JobIndex int `json:"jobIndex,omitempty"`
	// podIndex is the Job completion index of the coordinator pod.
	PodIndex int `json:"podIndex,omitempty"`
}

// VolumeClaimPolicy defines volume claim templates and lifecycle management for shared PVCs.
type VolumeClaimPolicy struct {
	Templates       []corev1.PersistentVolumeClaim `json:"templates,omitempty"`
	RetentionPolicy *VolumeRetentionPolicy         `json:"retentionPolicy,omitempty"`
}

// VolumeRetentionPolicy says what happens to the PVCs when the JobSet is deleted.
type VolumeRetentionPolicy struct {
	WhenDeleted *RetentionPolicyType `json:"whenDeleted,omitempty"`
}

// RetentionPolicyType is Delete or Retain.
type RetentionPolicyType string

// The label and annotation keys JobSet's controller puts on every child Job and its pods, each as a label and as
// an annotation with the same value (labelAndAnnotateObject, pkg/controllers/jobset_controller.go at the commit
// above; the keys from api/jobset/v1alpha2/jobset_types.go and pkg/constants/constants.go). A container reads
// them only through the downward API: fieldRef metadata.labels['KEY'] or metadata.annotations['KEY'].
const (
	JobSetNameKey         = "jobset.sigs.k8s.io/jobset-name"            // the JobSet's name
	JobSetUIDKey          = "jobset.sigs.k8s.io/jobset-uid"             // the JobSet's metadata.uid
	ReplicatedJobNameKey  = "jobset.sigs.k8s.io/replicatedjob-name"     // the replicatedJob's name
	ReplicatedJobReplicas = "jobset.sigs.k8s.io/replicatedjob-replicas" // that replicatedJob's replicas
	GlobalReplicasKey     = "jobset.sigs.k8s.io/global-replicas"        // replicas summed over every replicatedJob
	JobIndexKey           = "jobset.sigs.k8s.io/job-index"              // the Job's index in its replicatedJob
	JobGlobalIndexKey     = "jobset.sigs.k8s.io/job-global-index"       // the Job's index over the whole JobSet
	JobKey                = "jobset.sigs.k8s.io/job-key"                // sha1 hex of "<namespace>/<job name>"
	GroupNameKey          = "jobset.sigs.k8s.io/group-name"             // the replicatedJob's groupName
	GroupReplicasKey      = "jobset.sigs.k8s.io/group-replicas"         // replicas summed over the group
	JobGroupIndexKey      = "jobset.sigs.k8s.io/job-group-index"        // the Job's index within its group
	RestartsKey           = "jobset.sigs.k8s.io/restart-attempt"        // jobSet.status.restarts when the Job was made
	CoordinatorKey        = "jobset.sigs.k8s.io/coordinator"            // <js>-<rjob>-<job>-<pod>.<subdomain>, with spec.coordinator
	// ExclusiveKey is an annotation a user sets on the JobSet (or a replicatedJob template) for one Job per
	// topology domain (e.g. cloud.google.com/gke-nodepool: one slice per node pool); JobSet copies it to the pods.
	ExclusiveKey = "alpha.jobset.sigs.k8s.io/exclusive-topology"
)
