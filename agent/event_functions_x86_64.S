/* The event reporting functions: one bare `ret` each, .size 1, its own
 * address, followed by int3 padding up to the next 16-byte boundary. A
 * controller may overwrite the `ret` and the first padding byte with
 * `cc c3` (int3; ret): the trap then leaves rip on a `ret`, so resuming needs
 * no register change. Each is called with the subject record in rdi.
 *
 * tdagent_report_functions (hidden) indexes them by td_event_e so the C code
 * calls them directly, not through the PLT (local labels: the table
 * needs only relative relocations). */

#define EVENT_FUNCTION(name)                    \
    .p2align 4, 0xcc;                           \
    .globl __tdagent_event_##name;              \
    .type __tdagent_event_##name, @function;    \
__tdagent_event_##name:                         \
.Lfunction_##name:                              \
    ret;                                        \
    .size __tdagent_event_##name, 1

    .text
EVENT_FUNCTION(create)
EVENT_FUNCTION(death)
EVENT_FUNCTION(reap)
EVENT_FUNCTION(lock_try)
EVENT_FUNCTION(sleep)
EVENT_FUNCTION(ready)
EVENT_FUNCTION(timeout)
EVENT_FUNCTION(catchsig)
EVENT_FUNCTION(concurrency)
EVENT_FUNCTION(pri_inherit)
    .p2align 4, 0xcc

/* void tdagent_stop_for_report(void (*function)(struct tdagent_thread *),
 *                              struct tdagent_thread *subject,
 *                              const uint64_t *mask)
 *
 * The other way a controller is told of a report (see tdagent_report): the
 * controller's stop signal is already queued for this thread and blocked
 * (sigqueue-style: si_code SI_QUEUE, si_value the address of
 * __tdagent_stop_signals);
 * rt_sigprocmask(SIG_SETMASK, mask) unblocks it, and the kernel delivers it
 * on the way out of that system call. A tracer sees a signal-delivery-stop
 * with the pc on __tdagent_report_stopped, the reporting function in r8 and
 * the subject record in r9 (registers the system call neither reads nor
 * changes). Without a tracer the signal takes its disposition, which the
 * controller chose to be "ignore". */
    .globl tdagent_stop_for_report
    .hidden tdagent_stop_for_report
    .type tdagent_stop_for_report, @function
tdagent_stop_for_report:
    .cfi_startproc                   /* a leaf: the return address at [rsp] */
    mov %rdi, %r8
    mov %rsi, %r9
    mov %rdx, %rsi                   /* set */
    xor %edx, %edx                   /* oldset: NULL */
    mov $2, %edi                     /* SIG_SETMASK */
    mov $8, %r10d                    /* the kernel's sigset size */
    mov $14, %eax                    /* SYS_rt_sigprocmask */
    syscall
    .globl __tdagent_report_stopped
    .type __tdagent_report_stopped, @function
__tdagent_report_stopped:
    ret
    .cfi_endproc
    .size __tdagent_report_stopped, 1
    .size tdagent_stop_for_report, . - tdagent_stop_for_report
    .p2align 4, 0xcc

/* void (*const tdagent_report_functions[16])(struct tdagent_thread *) */
    .section .data.rel.ro,"aw"
    .p2align 3
    .globl tdagent_report_functions
    .hidden tdagent_report_functions
    .type tdagent_report_functions, @object
tdagent_report_functions:
    .quad 0                          /* 0  TD_EVENT_NONE */
    .quad .Lfunction_ready           /* 1  TD_READY */
    .quad .Lfunction_sleep           /* 2  TD_SLEEP */
    .quad 0                          /* 3  TD_SWITCHTO: not observable */
    .quad 0                          /* 4  TD_SWITCHFROM: not observable */
    .quad .Lfunction_lock_try        /* 5  TD_LOCK_TRY */
    .quad .Lfunction_catchsig        /* 6  TD_CATCHSIG */
    .quad 0                          /* 7  TD_IDLE: not observable */
    .quad .Lfunction_create          /* 8  TD_CREATE */
    .quad .Lfunction_death           /* 9  TD_DEATH */
    .quad 0                          /* 10 TD_PREEMPT: not observable */
    .quad .Lfunction_pri_inherit     /* 11 TD_PRI_INHERIT */
    .quad .Lfunction_reap            /* 12 TD_REAP */
    .quad .Lfunction_concurrency     /* 13 TD_CONCURRENCY */
    .quad .Lfunction_timeout         /* 14 TD_TIMEOUT */
    .quad 0                          /* 15 */
    .size tdagent_report_functions, 128

    .section .note.GNU-stack,"",@progbits
