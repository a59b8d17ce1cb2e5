// seccomp-run: runs a command under the system-call limits of mailslot-relay.service, so
// tools/deploy/check can try the real relay binary against them where systemd cannot start the
// unit (a container, a CI runner). It reproduces two settings:
//   SystemCallFilter=  the allowed calls, one name a line in ALLOWED_FILE (the check expands the
//                      unit's groups with `systemd-analyze syscall-filter`); any other call kills
//                      the process, which is stricter than the unit's EPERM, so nothing is hidden;
//   MemoryDenyWriteExecute=yes  as systemd 252 does it: no mapping both writable and executable,
//                      no mprotect/pkey_mprotect adding PROT_EXEC, no shmat with SHM_EXEC.
// NoNewPrivileges=yes comes with it (the kernel requires it to load a filter unprivileged), and,
// with --user, DynamicUser=yes's essence: an unprivileged uid and gid with no supplementary groups
// (run as root, SQLite takes paths, fchown among them, that the unit's relay never takes).
// Build: cc -O2 -o seccomp-run seccomp-run.c -lseccomp
// Usage: seccomp-run [--user UID:GID] ALLOWED_FILE COMMAND [ARGUMENT...]
#include <errno.h>
#include <grp.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <unistd.h>

static int fail(const char *what, int error) {
    fprintf(stderr, "seccomp-run: %s: %s\n", what, strerror(error < 0 ? -error : error));
    return 70;
}

// Memory that is writable and executable at once, or becomes executable later, is refused.
static int load_write_execute_filter(void) {
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (ctx == NULL) return fail("seccomp_init", ENOMEM);
    const uint32_t deny = SCMP_ACT_ERRNO(EPERM);
    int rc = seccomp_rule_add(ctx, deny, SCMP_SYS(mmap), 1,
                              SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC | PROT_WRITE, PROT_EXEC | PROT_WRITE));
    if (rc == 0) rc = seccomp_rule_add(ctx, deny, SCMP_SYS(mprotect), 1, SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC));
    if (rc == 0) rc = seccomp_rule_add(ctx, deny, SCMP_SYS(pkey_mprotect), 1, SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, PROT_EXEC));
    if (rc == 0) rc = seccomp_rule_add(ctx, deny, SCMP_SYS(shmat), 1, SCMP_A2(SCMP_CMP_MASKED_EQ, SHM_EXEC, SHM_EXEC));
    if (rc == 0) rc = seccomp_load(ctx);
    seccomp_release(ctx);
    return rc == 0 ? 0 : fail("MemoryDenyWriteExecute filter", rc);
}

// Only the listed calls; a name this kernel or libseccomp does not know is skipped, as systemd does.
static int load_allow_list(const char *path) {
    FILE *file = fopen(path, "r");
    if (file == NULL) return fail(path, errno);
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
    if (ctx == NULL) { fclose(file); return fail("seccomp_init", ENOMEM); }
    char line[128];
    int allowed = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, file) != NULL) {
        line[strcspn(line, " \t\r\n")] = '\0';
        if (line[0] == '\0' || line[0] == '#') continue;
        int number = seccomp_syscall_resolve_name(line);
        if (number == __NR_SCMP_ERROR) continue;
        rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, number, 0);
        // A pseudo-call that does not exist on this architecture.
        if (rc == -EDOM || rc == -EINVAL) rc = 0; else if (rc == 0) allowed++;
    }
    fclose(file);
    if (rc == 0 && allowed < 50) {
        seccomp_release(ctx);
        fprintf(stderr, "seccomp-run: only %d known calls in %s; is it the expanded list?\n", allowed, path);
        return 70;
    }
    if (rc == 0) rc = seccomp_load(ctx);
    seccomp_release(ctx);
    return rc == 0 ? 0 : fail("SystemCallFilter", rc);
}

int main(int argc, char **argv) {
    int first = 1;
    if (argc > 2 && strcmp(argv[1], "--user") == 0) {
        unsigned uid, gid;
        char end;
        if (sscanf(argv[2], "%u:%u%c", &uid, &gid, &end) != 2 || uid == 0) {
            fprintf(stderr, "seccomp-run: --user takes UID:GID, not root\n");
            return 64;
        }
        if (setgroups(0, NULL) != 0) return fail("setgroups", errno);
        if (setgid(gid) != 0) return fail("setgid", errno);
        if (setuid(uid) != 0) return fail("setuid", errno);
        first = 3;
    }
    if (argc < first + 2) {
        fprintf(stderr, "usage: seccomp-run [--user UID:GID] ALLOWED_FILE COMMAND [ARGUMENT...]\n");
        return 64;
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fail("PR_SET_NO_NEW_PRIVS", errno);
    int rc = load_write_execute_filter();
    if (rc == 0) rc = load_allow_list(argv[first]);
    if (rc != 0) return rc;
    execv(argv[first + 1], argv + first + 1);
    return fail(argv[first + 1], errno);
}
