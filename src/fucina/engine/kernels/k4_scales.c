
// fucina: Q4_K/Q5_K's 12 packed scale bytes as 8 six-bit scales (bytes of utmp[0..1]) then 8 six-bit mins
// (bytes of utmp[2..3]), as ggml's reference kernels decode them. Shared by the column groups
// (kquant_common.c) and the AMX microtile's unpack (tiled_amx.cpp); valid C and C++.
static inline void fucina_k4_scales_mins(const uint8_t * packed, uint32_t utmp[4]) {
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    memcpy(utmp, packed, 12);
    utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
    const uint32_t uaux = utmp[1] & kmask1;
    utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
    utmp[2] = uaux;
    utmp[0] &= kmask1;
}
