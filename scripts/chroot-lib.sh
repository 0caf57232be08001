# Shared by scripts/wheel-test.sh and scripts/csi-image.sh (sourced): the mounts made into a
# chroot, undone in reverse order by unmount_all (an EXIT trap while they exist).
mounted=()
unmount_all() {
    local i
    for (( i=${#mounted[@]}-1; i>=0; i-- )); do
        umount -R "${mounted[$i]}" 2>/dev/null || umount -lR "${mounted[$i]}" 2>/dev/null || true
    done
    mounted=()
}
