/* The offsets of the loader block, the page the loader routine
 * (core/inject/agent_loader_x86_64.S) reads and fills, and the few system constants
 * the routine uses. Shared by the routine and the C++ side: this file holds
 * the numbers, struct loader_block (core/inject/agent_loader_routine.hpp) the
 * layout, and static_asserts there check every number against the struct
 * and the system headers. Plain preprocessor definitions: an assembly file
 * includes it. */
#ifndef TDCTL_CORE_AGENT_LOADER_BLOCK_H
#define TDCTL_CORE_AGENT_LOADER_BLOCK_H

/* libc functions of the target, by address (filled by tdctl). */
#define LOADER_BLOCK_DLOPEN 0
#define LOADER_BLOCK_DLERROR 8
#define LOADER_BLOCK_CLOSE 16
#define LOADER_BLOCK_MUNMAP 24
#define LOADER_BLOCK_STRDUP 32
/* The outcome (filled by the routine). */
#define LOADER_BLOCK_HANDLE 40
#define LOADER_BLOCK_ERROR 48
/* What the routine reads, and `done`, which it sets last. */
#define LOADER_BLOCK_FD 56
#define LOADER_BLOCK_TRACED 64
#define LOADER_BLOCK_DONE 72
#define LOADER_BLOCK_SIZE 80
#define LOADER_BLOCK_BASE 88
#define LOADER_BLOCK_FD_PATH 96
#define LOADER_BLOCK_MEMFD_NAME 128
#define LOADER_BLOCK_THREAD 160
#define LOADER_BLOCK_TIMEOUT 176
#define LOADER_BLOCK_WAITS 192
#define LOADER_BLOCK_MODULE_NAME 200
#define LOADER_BLOCK_PATH 256
#define LOADER_BLOCK_BYTES 4096

/* struct link_map's l_name (<link.h>: the public head of glibc's link map). */
#define LOADER_LINK_MAP_NAME 8
/* dlopen's RTLD_NOW, futex(2)'s FUTEX_WAIT_PRIVATE, x86-64's SYS_futex. */
#define LOADER_RTLD_NOW 2
#define LOADER_FUTEX_WAIT_PRIVATE 128
#define LOADER_SYS_FUTEX 202

#endif
