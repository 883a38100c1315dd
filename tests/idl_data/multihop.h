/* Test-only stand-in for core-rs/include/multihop.h: the C ABI prototypes the generated
 * stubs are written against, so the generated codec compiles without the runtime library. */
#ifndef MULTIHOP_H
#define MULTIHOP_H
#include <stdint.h>
#include <stddef.h>
typedef struct mh_channel mh_channel;
int mh_send(mh_channel *ch, const void *data, size_t len, int64_t timeout_ms);
int mh_recv(mh_channel *ch, void *buf, size_t cap, size_t *len, int64_t timeout_ms);
#define MH_OK 0
#define MH_E_TIMEOUT -1
#define MH_E_CLOSED -2
#define MH_E_BUSY -3
#define MH_E_TOO_LARGE -4
#define MH_E_INVALID -5
#define MH_E_PROTOCOL -6
#endif
