/* The sandbox ("pause") process of every pod on a devcluster real node: it holds the pod's
 * namespaces, reaps orphans it inherits as PID 1, and exits cleanly on SIGINT or SIGTERM.
 * Built by tools/images.py into registry.k8s.io/pause:3.10 (no registry is reachable here). */
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
    (void)sig;
    _exit(0);
}

static void on_child(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction stop = {.sa_handler = on_stop};
    struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
    sigaction(SIGINT, &stop, NULL);
    sigaction(SIGTERM, &stop, NULL);
    sigaction(SIGCHLD, &child, NULL);
    for (;;) {
        pause();
    }
}
