package workerenv

import (
	"slices"
	"strings"
)

// outerTask are the variables by which an outer launcher (a Slurm step's srun, mpirun, Hydra, jsrun, PALS) tells
// one of its tasks who it is: tpurun is that task, its workers are not. Inherited, every worker would take itself
// for the outer task (the same rank in all of them): JAX's cluster detection (SLURM_PROCID and SLURM_LOCALID;
// OMPI_MCA_orte_hnp_uri, then OMPI_COMM_WORLD_*), Lightning's (JSM_NAMESPACE_* for LSF; SLURM_PROCID),
// accelerate's fallbacks (OMPI_COMM_WORLD_*, MV2_COMM_WORLD_*, PMI_RANK and PMI_SIZE, MPI_LOCALRANKID and
// MPI_LOCALNRANKS), an MPI library's own start (PMIX_RANK, PMI_FD: a descriptor the workers do not have). So they
// are dropped with the rank, local rank and task pid, and with the sizes whose only use is to go with those ranks
// (a world of outer tasks, not of workers). What describes the job or the node stays: SLURM_JOB_ID,
// SLURM_JOB_NODELIST, SLURM_NODELIST, SLURM_NODEID (this node's rank, which tpurun itself reads), SLURM_NTASKS,
// SLURM_CPUS_ON_NODE, PMIX_NAMESPACE, the OMPI_MCA_ settings but the two named here. The README lists them.
var outerTask = []string{
	// Slurm (srun): the task's rank in the step, its rank on the node, its pid
	"SLURM_PROCID", "SLURM_LOCALID", "SLURM_TASK_PID",
	// Open MPI: the process's rank in the job (ORTE's vpid) and the contact of the mpirun whose task it is
	"OMPI_MCA_ess_base_vpid", "OMPI_MCA_orte_hnp_uri",
	// PMI and PMIx (MPICH's Hydra, Intel MPI, Slurm's --mpi=pmi2/pmix, Open MPI 5), Cray's PMI
	"PMI_RANK", "PMI_SIZE", "PMI_FD", "PMI_ID", "PMI_LOCAL_RANK", "PMI_LOCAL_SIZE", "PMIX_RANK", "PMIX_ID",
	// MPICH's and Intel MPI's ranks on the node
	"MPI_LOCALRANKID", "MPI_LOCALNRANKS",
	// HPE's PALS (mpiexec on Cray EX), Cray's ALPS
	"PALS_RANKID", "PALS_LOCAL_RANKID", "ALPS_APP_PE",
}

// outerTaskPrefixes name whole families of outer tasks' variables: Open MPI's and MVAPICH's COMM_WORLD
// (RANK, LOCAL_RANK, NODE_RANK, SIZE, LOCAL_SIZE), IBM's jsrun (JSM_NAMESPACE_RANK, _LOCAL_RANK, _SIZE, ...).
var outerTaskPrefixes = []string{"OMPI_COMM_WORLD_", "MV2_COMM_WORLD_", "JSM_NAMESPACE_"}

// OuterTask reports whether key is an outer launcher's per-task variable (see outerTask): never passed to a
// worker.
func OuterTask(key string) bool {
	return slices.Contains(outerTask, key) ||
		slices.ContainsFunc(outerTaskPrefixes, func(p string) bool { return strings.HasPrefix(key, p) })
}
