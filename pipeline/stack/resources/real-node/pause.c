/* The real node's sandbox ("pause") process: it holds a pod's namespaces open and does nothing else.
 * Kubernetes' own pause image cannot be pulled here, so the stack compiles this (static, no libc
 * beyond what it links in) and commits it as the sandbox image. Like upstream's, it exits on SIGINT
 * or SIGTERM and reaps the children it may inherit as PID 1 of a pod's PID namespace. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int signo) {
  (void)signo;
  _exit(0);
}

static void reap(int signo) {
  (void)signo;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop = {.sa_handler = quit};
  struct sigaction child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0 ||
      sigaction(SIGCHLD, &child, NULL) < 0) {
    return 1;
  }
  for (;;) {
    pause();
  }
}
