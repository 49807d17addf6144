# What `cmake --install` puts into a prefix, and the Debian package CPack
# makes of it (`cpack -G DEB` in the build directory):
#   bin/                      every psync program
#   lib/libpsync.so*          the library (psync::psync)
#   include/psync/            the public headers, as they are in the tree
#   lib/cmake/psync/          psyncConfig.cmake, psyncConfigVersion.cmake, psyncTargets.cmake
#   share/doc/psync/          README, the guide, the CLI contract, examples/
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

configure_file(${PSYNC_SOURCE_ROOT}/cmake/version.h.in ${PROJECT_BINARY_DIR}/include/psync/version.h @ONLY)

set(PSYNC_PROGRAMS psync-coordinator psync-worker psyncctl psync-launch psync-relay psync-tokenize psync-export
    psync-sample)
# Installed programs find libpsync.so next to them, wherever the prefix is.
set_target_properties(${PSYNC_PROGRAMS} psync PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(TARGETS ${PSYNC_PROGRAMS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS psync EXPORT psyncTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PSYNC_SOURCE_ROOT}/include/psync ${PROJECT_BINARY_DIR}/include/psync
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")

set(PSYNC_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/psync)
install(EXPORT psyncTargets NAMESPACE psync:: DESTINATION ${PSYNC_CMAKE_DIR})
set(BIN_DIR ${CMAKE_INSTALL_BINDIR})
configure_package_config_file(${PSYNC_SOURCE_ROOT}/cmake/psyncConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/psyncConfig.cmake
                              INSTALL_DESTINATION ${PSYNC_CMAKE_DIR} PATH_VARS BIN_DIR)
# 0.9.x works with programs built against any 0.9.y (same minor).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/psyncConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/psyncConfig.cmake ${PROJECT_BINARY_DIR}/psyncConfigVersion.cmake
        DESTINATION ${PSYNC_CMAKE_DIR})
# OPTIONAL: the image build's context (.dockerignore) leaves the docs out.
install(FILES ${PSYNC_SOURCE_ROOT}/README.md ${PSYNC_SOURCE_ROOT}/docs/cli-contract.md
              ${PSYNC_SOURCE_ROOT}/docs/guide-your-model.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} OPTIONAL)
# The examples, to copy and build against the package (docs/guide-your-model.md).
install(DIRECTORY ${PSYNC_SOURCE_ROOT}/examples DESTINATION ${CMAKE_INSTALL_DOCDIR})

# ---- Debian package: what apt must install beside it (Debian 12 names).
set(CPACK_PACKAGE_NAME psync)
set(CPACK_PACKAGE_VENDOR "psync")
set(CPACK_PACKAGE_CONTACT "psync developers <psync@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_STRIP_FILES ON)  # the package ships no debug info (a build tree keeps it)
# Runtime: shlibdeps reads the binaries' NEEDED entries (dpkg-shlibdeps);
# what a user's build needs (headers, CMake configs) is listed by hand.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libabsl-dev, cmake, g++")
# A CUDA build's programs also load CUDA's runtime, cuBLAS(Lt), cuDNN and
# NCCL, which no Debian package provides (dpkg-shlibdeps skips them): a host
# that runs it has NVIDIA's CUDA 13 installed. The package of a CPU build
# (-DWITH_CUDA=OFF, as deploy/docker/Dockerfile makes it) needs nothing more.
if(PSYNC_HAVE_CUDA)
  set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "${PROJECT_DESCRIPTION}\n Built with CUDA: needs NVIDIA's CUDA 13 runtime, cuBLAS, cuDNN 9 and NCCL on the host.")
endif()
include(CPack)
