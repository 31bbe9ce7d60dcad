/* The loader thread's start routine (x86-64, System V), for
 * `tdctl -p PID --agent` (core/inject/agent_loader.hpp). tdctl copies the bytes
 * between tdctl_loader_routine_start and tdctl_loader_routine_end into a
 * page of the target and starts a thread there with pthread_create(),
 * whose argument (rdi) is the loader block: the page after it, laid out as
 * core/inject/agent_loader_block.h says. The bytes are position-independent (every
 * access is through rbx, every jump relative) and are never run in tdctl
 * itself, hence .rodata.
 *
 * What the routine does:
 *   1. dlopen(path, RTLD_NOW) when the block names the agent's own file
 *      (path not empty: the target sees that very file there);
 *   2. else, or when that failed, dlopen(fd_path, RTLD_NOW) on the memfd
 *      ("/proc/self/fd/N"), then names the new module module_name in the
 *      link map (a copy made with strdup; the handle glibc returns is the
 *      module's struct link_map): "/proc/self/fd/N" would name, in any
 *      debugger that reads the link map, the debugger's own descriptor N;
 *   3. when no dlopen succeeded, keeps dlerror()'s message;
 *   4. close(fd), then `done` = 1;
 *   5. waits while `traced` is not 0 (futex waits of `timeout` each, at
 *      most `waits` - 1 of them): tdctl reads the outcome, then puts
 *      `traced` back to 0; so does the guardian after a tracer's death (the
 *      word is journaled);
 *   6. tail-calls munmap(base, size): both pages go, and munmap returns to
 *      the caller of the routine (glibc's start_thread), which ends the
 *      thread. The routine never faults and never needs tdctl to end.
 */
#include "core/inject/agent_loader_block.h"

    .section .rodata.tdctl_loader_routine, "a"
    .p2align 4
    .globl tdctl_loader_routine_start
    .hidden tdctl_loader_routine_start
    .globl tdctl_loader_routine_end
    .hidden tdctl_loader_routine_end
tdctl_loader_routine_start:
    push %rbx                                     /* also aligns rsp to 16 for the calls */
    mov %rdi, %rbx
    cmpb $0, LOADER_BLOCK_PATH(%rbx)
    je .Lfrom_memfd
    lea LOADER_BLOCK_PATH(%rbx), %rdi
    mov $LOADER_RTLD_NOW, %esi
    call *LOADER_BLOCK_DLOPEN(%rbx)
    mov %rax, LOADER_BLOCK_HANDLE(%rbx)
    test %rax, %rax
    jnz .Lclose
.Lfrom_memfd:
    lea LOADER_BLOCK_FD_PATH(%rbx), %rdi
    mov $LOADER_RTLD_NOW, %esi
    call *LOADER_BLOCK_DLOPEN(%rbx)
    mov %rax, LOADER_BLOCK_HANDLE(%rbx)
    test %rax, %rax
    jz .Lfailed
    lea LOADER_BLOCK_MODULE_NAME(%rbx), %rdi
    call *LOADER_BLOCK_STRDUP(%rbx)
    test %rax, %rax
    jz .Lclose                                    /* no memory: the name stays */
    mov LOADER_BLOCK_HANDLE(%rbx), %rcx
    mov %rax, LOADER_LINK_MAP_NAME(%rcx)          /* the old name stays allocated: it may be in use */
    jmp .Lclose
.Lfailed:
    call *LOADER_BLOCK_DLERROR(%rbx)
    mov %rax, LOADER_BLOCK_ERROR(%rbx)
.Lclose:
    mov LOADER_BLOCK_FD(%rbx), %rdi
    call *LOADER_BLOCK_CLOSE(%rbx)
    movq $1, LOADER_BLOCK_DONE(%rbx)
.Lwait:
    cmpq $0, LOADER_BLOCK_TRACED(%rbx)
    je .Lend                                      /* tdctl has read the outcome, or is gone */
    decl LOADER_BLOCK_WAITS(%rbx)
    jz .Lend                                      /* or has been waited for long enough */
    lea LOADER_BLOCK_TRACED(%rbx), %rdi           /* futex(&traced, FUTEX_WAIT_PRIVATE, 1, &timeout, 0, 0) */
    mov $LOADER_FUTEX_WAIT_PRIVATE, %esi
    mov $1, %edx
    lea LOADER_BLOCK_TIMEOUT(%rbx), %r10
    xor %r8d, %r8d
    xor %r9d, %r9d
    mov $LOADER_SYS_FUTEX, %eax
    syscall
    jmp .Lwait
.Lend:
    mov LOADER_BLOCK_MUNMAP(%rbx), %rax
    mov LOADER_BLOCK_BASE(%rbx), %rdi
    mov LOADER_BLOCK_SIZE(%rbx), %rsi
    pop %rbx
    jmp *%rax
tdctl_loader_routine_end:

    .section .note.GNU-stack,"",@progbits
