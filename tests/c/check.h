/* Checks shared by the C test programs: CHECK counts a failed condition and
 * goes on; CALL stops the program (exit 2) when a C-ABI call does not
 * return MH_OK, printing the call, the code and mh_last_error(). */
#ifndef MULTIHOP_TEST_CHECK_H
#define MULTIHOP_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "multihop.h"

static int checks, failures;

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        checks++;                                                                        \
        if (!(cond)) {                                                                   \
            failures++;                                                                  \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);    \
        }                                                                                \
    } while (0)

#define CALL(call)                                                                       \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        if (rc_ != MH_OK) {                                                              \
            fprintf(stderr, "%s:%d: %s returned %d (%s): %s\n", __FILE__, __LINE__, #call, \
                    rc_, mh_strerror(rc_), mh_last_error());                             \
            exit(2);                                                                     \
        }                                                                                \
    } while (0)

/* Milliseconds any single wait of a test program may take. */
#define T_MS 30000

#endif
