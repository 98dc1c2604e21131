# Install rules and the package configuration (included by the top-level
# CMakeLists.txt after every target exists).
include(CMakePackageConfigHelpers)

# Installed binaries find the dialect library beside them and MLIR/LLVM
# where Debian puts them.
set(moec_rpath "\$ORIGIN/../${CMAKE_INSTALL_LIBDIR}" "${LLVM_LIBRARY_DIR}")
set(moec_tools moe-opt moe-translate moe-lsp-server moe-report moe-tokenize moec moe-halide-gen)
set_target_properties(MoEDialect ${moec_tools} PROPERTIES INSTALL_RPATH "${moec_rpath}")

install(TARGETS MoEContract MoEDialect MoETransforms EXPORT MoECTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS ${moec_tools} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(dir ${PROJECT_SOURCE_DIR}/dialect/include ${PROJECT_BINARY_DIR}/dialect/include
            ${PROJECT_SOURCE_DIR}/passes/include ${PROJECT_BINARY_DIR}/passes/include)
  install(DIRECTORY ${dir}/moe DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          FILES_MATCHING PATTERN "*.h" PATTERN "*.inc" PATTERN "*.td"
          PATTERN "CMakeFiles" EXCLUDE)
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/contract/include/moec
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# What an installed moec links training binaries with: the runtime's
# headers and static libraries (codegen/lib/Toolchain.cpp looks for them
# in PREFIX/include and PREFIX/<libdir>/moec beside its own bin/).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/runtime/include/moert
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
set(moec_runtime_libs moert moert_cpu moert_main MoEFrontendSpec)
if(TARGET moert_mpi)
  list(APPEND moec_runtime_libs moert_mpi)
endif()
foreach(lib ${moec_runtime_libs})
  install(FILES $<TARGET_FILE:${lib}> DESTINATION ${CMAKE_INSTALL_LIBDIR}/moec)
endforeach()

set(cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/MoEC)
install(EXPORT MoECTargets NAMESPACE MoEC:: DESTINATION ${cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/MoECConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/MoECConfig.cmake
                              INSTALL_DESTINATION ${cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/MoECConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/MoECConfig.cmake ${PROJECT_BINARY_DIR}/MoECConfigVersion.cmake
        DESTINATION ${cmake_dir})
