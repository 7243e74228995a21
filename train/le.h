/*
 * le.h - little-endian integers in byte buffers, for the file and wire
 * formats of train/ (checkpoints, safetensors, torch.save archives, the TCP
 * transport's frames).  Byte by byte, so any alignment and any host order.
 */
#ifndef MDS_TRAIN_LE_H
#define MDS_TRAIN_LE_H

#include <stdint.h>

static inline uint32_t le_get16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static inline uint32_t le_get32(const unsigned char *p) { return le_get16(p) | le_get16(p + 2) << 16; }
static inline uint64_t le_get64(const unsigned char *p) { return le_get32(p) | (uint64_t)le_get32(p + 4) << 32; }

static inline void le_put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> 8 * i);
}
static inline void le_put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> 8 * i);
}

#endif
