// Package dockertest is test plumbing: it is imported only by tests (of examples/Dockerfile, and of tpurun as the
// image's PID 1), never by tpurun itself, so that the tpurun binary links nothing of it. No Docker engine is needed:
// it reads a Dockerfile and does what a build would do with it, as far as this machine can. It owns:
//
//   - Parse: a Dockerfile's stages and instructions (continuation lines, comments, exec-form JSON arguments, flags
//     such as COPY --from=build), as much of Docker's syntax as examples/Dockerfile uses; what it does not know
//     (heredocs, parser directives, variables in arguments) is an error, not a guess;
//   - the image's facts a test checks: the USER a stage runs as (numeric, as Kubernetes' runAsNonRoot can verify)
//     and its exec-form ENTRYPOINT;
//   - Ignore and SendContext: the build context a Docker client sends for a directory, every file that its
//     .dockerignore does not exclude, matched with Docker's own rules (github.com/moby/patternmatcher and its
//     ignorefile, which the docker CLI and BuildKit use);
//   - (*Stage).Build: a build stage's WORKDIR, ENV, COPY and RUN steps run as shell steps on this machine, the
//     stage's filesystem mapped under a directory.
package dockertest
